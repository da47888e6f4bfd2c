// Sandbox-level tools: sandbox_status (never starts a sandbox) and
// sandbox_destroy.
#include "tools/sandbox_call.h"

#include <thread>

namespace agentbox::tools {

namespace {

json status_of(sandbox::Manager* manager, const std::string& conversation) {
  json status = {{"conversation", conversation}, {"sandbox", nullptr}, {"state", "none"},
                 {"sessions", json::array()},    {"processes", json::array()}, {"workspace_bytes", 0},
                 {"last_snapshot", nullptr}};
  auto sandbox = manager ? manager->find(conversation) : nullptr;
  if (!sandbox) return status;
  status["sandbox"] = sandbox->id();
  status["state"] = sandbox->state();
  status["workspace_bytes"] = sandbox->workspace_bytes();
  auto client = sandbox->client();
  if (client && client->alive()) {
    try {
      json agent = client->call("status", json::object(), std::chrono::seconds(10));
      status["sessions"] = agent.value("sessions", json::array());
      status["processes"] = agent.value("processes", json::array());
    } catch (const sandbox::SandboxError& e) {
      status["state"] = "failed";
      status["error"] = {{"code", e.code()}, {"message", e.what()}};
    }
  }
  return status;
}

}  // namespace

void register_sandbox_tools(Registry& registry, const Services& services) {
  registry.add("sandbox_status", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    std::thread([manager = services.sandboxes, context, reply] {
      json status = status_of(manager, context->conversation());
      std::string text = status["sandbox"].is_null()
                             ? "Conversation '" + context->conversation() +
                                   "' has no sandbox yet; the first command or file call starts one."
                             : "Sandbox " + status["sandbox"].get<std::string>() + " is " +
                                   status["state"].get<std::string>() + "; sessions: " + status["sessions"].dump() +
                                   "; processes: " + status["processes"].dump() + "; workspace " +
                                   std::to_string(status["workspace_bytes"].get<std::uint64_t>()) + " bytes";
      reply(ToolResult::ok(status, text));
    }).detach();
  });
  registry.add("sandbox_destroy", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Manager* manager = manager_or_reply(services, reply);
    if (!manager) return;
    std::thread([manager, context, reply] {
      auto sandbox = manager->find(context->conversation());
      json id = sandbox ? json(sandbox->id()) : json(nullptr);
      bool destroyed = manager->destroy(context->conversation());
      reply(ToolResult::ok({{"destroyed", destroyed}, {"sandbox", id}},
                           destroyed ? "Destroyed the sandbox and its files." : "There was no sandbox to destroy."));
    }).detach();
  });
}

}  // namespace agentbox::tools
