// network_status (docs/design.md section 10): the network a conversation's
// sandbox has, the policy in force and what the proxy denied. Read-only:
// the policy is the user's, and no tool changes it.
#include "tools/sandbox_call.h"

#include <ctime>

namespace agentbox::tools {

namespace {

std::string utc_text(std::chrono::system_clock::time_point at) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string network_text(const json& status) {
  std::string mode = status["mode"].get<std::string>();
  if (mode == "none") return "This sandbox has loopback only: no network (the server runs with --network none).";
  if (mode == "host") return "This sandbox shares the host's network (the server runs with --network host).";
  std::string text = "This sandbox reaches out only through the proxy at " + status["proxy"].get<std::string>() +
                     " (HTTP_PROXY and HTTPS_PROXY hold it), under this policy: " + status["policy"].dump() + ".";
  const auto& denied = status["denied"];
  if (denied.empty()) return text + " Nothing was denied recently.";
  text += " Recently denied:";
  for (const auto& d : denied) text += "\n- " + d["at"].get<std::string>() + " " + d["reason"].get<std::string>();
  return text;
}

}  // namespace

void add_network_denials(json& result, std::string& text, sandbox::Sandboxes& sandboxes,
                         const std::string& conversation, std::chrono::system_clock::time_point since,
                         std::chrono::system_clock::time_point until) {
  result.erase("network_denied");  // only the server's own record says what was denied, never the box
  auto denials = sandboxes.network_denials(conversation, since);
  json list = json::array();
  for (const auto& denial : denials) {
    if (denial.at > until) continue;
    list.push_back({{"host", denial.host}, {"port", denial.port}, {"reason", denial.reason}});
    text += "\n[network denied: " + denial.reason + "]";
  }
  if (!list.empty()) result["network_denied"] = std::move(list);
}

void register_network_tools(Registry& registry, const Services& services) {
  registry.add("network_status", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    run_blocking([sandboxes, context, reply] {
      sandbox::NetworkView view = sandboxes->network(context->conversation());
      json status = {{"mode", view.mode}, {"denied", json::array()}};
      if (view.mode == "proxy") {
        status["proxy"] = view.proxy;
        status["policy"] = view.policy;
      }
      for (const auto& d : view.denials)
        status["denied"].push_back({{"host", d.host}, {"port", d.port}, {"reason", d.reason}, {"at", utc_text(d.at)}});
      std::string text = network_text(status);
      reply(ToolResult::ok(std::move(status), std::move(text)));
    });
  });
}

}  // namespace agentbox::tools
