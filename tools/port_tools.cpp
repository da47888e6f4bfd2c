// port_expose, port_list, port_unexpose (docs/design.md section 12): a
// port inside the sandbox reached from the host at a stable URL
// (sandbox/ports.h). None of them starts or restores the sandbox: a
// connection to the URL does that.
#include "tools/sandbox_call.h"

namespace agentbox::tools {

namespace {

json port_json(const sandbox::ExposedPort& port) {
  json out = {{"port", port.port}, {"host_port", port.host_port}, {"url", port.url}, {"relaying", port.relaying}};
  if (!port.note.empty()) out["note"] = port.note;
  if (port.listening) out["listening"] = *port.listening;
  return out;
}

std::string port_line(const sandbox::ExposedPort& port) {
  std::string line = "port " + std::to_string(port.port) + " → " + port.url;
  if (!port.relaying) return line + " (not relayed: " + port.note + ")";
  if (port.listening) line += *port.listening ? " (listening now)" : " (nothing listens on it in the sandbox yet)";
  else line += " (the sandbox is not running; a connection brings it back)";
  return line;
}

// Runs fn on a blocking thread with the conversation's Sandboxes, turning
// a SandboxError into an error result.
template <typename Fn>
void with_sandboxes(const Services& services, const std::shared_ptr<CallContext>& context, ToolReply reply, Fn fn) {
  sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
  if (!sandboxes) return;
  run_blocking([sandboxes, context, reply, fn] {
    try {
      reply(fn(*sandboxes, context->conversation()));
    } catch (const SandboxError& e) {
      reply(error_result(e));
    }
  });
}

}  // namespace

void register_port_tools(Registry& registry, const Services& services) {
  registry.add("port_expose", [services](const json& arguments, std::shared_ptr<CallContext> context, ToolReply reply) {
    int port = arguments.at("port").get<int>();
    std::optional<int> host_port;
    if (arguments.contains("host_port")) host_port = arguments["host_port"].get<int>();
    with_sandboxes(services, context, reply, [port, host_port](sandbox::Sandboxes& sandboxes, const std::string& c) {
      auto exposed = sandboxes.expose_port(c, port, host_port);
      std::string text = port_line(exposed) +
                         ". The URL stays the same after an idle teardown, a restore or a server restart; start "
                         "the server with process_start restart: \"on-restore\" so it comes back by itself.";
      return ToolResult::ok(port_json(exposed), std::move(text));
    });
  });
  registry.add("port_list", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    with_sandboxes(services, context, reply, [](sandbox::Sandboxes& sandboxes, const std::string& c) {
      json ports = json::array();
      std::string text;
      for (const auto& exposed : sandboxes.exposed_ports(c)) {
        ports.push_back(port_json(exposed));
        text += (text.empty() ? "" : "\n") + port_line(exposed);
      }
      if (text.empty()) text = "No port is exposed; port_expose gives one a URL on the host.";
      return ToolResult::ok({{"ports", std::move(ports)}}, std::move(text));
    });
  });
  registry.add("port_unexpose", [services](const json& arguments, std::shared_ptr<CallContext> context,
                                           ToolReply reply) {
    int port = arguments.at("port").get<int>();
    with_sandboxes(services, context, reply, [port](sandbox::Sandboxes& sandboxes, const std::string& c) {
      if (!sandboxes.unexpose_port(c, port))
        return ToolResult::error(codes::kPortNotExposed, "port " + std::to_string(port) +
                                                             " is not exposed (port_list shows what is)");
      return ToolResult::ok({{"port", port}, {"unexposed", true}},
                            "port " + std::to_string(port) + " is no longer reachable from the host");
    });
  });
}

}  // namespace agentbox::tools
