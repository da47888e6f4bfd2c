// Sandbox-level tools: sandbox_status (never starts a sandbox) and
// sandbox_destroy.
#include "tools/sandbox_call.h"

#include "sandbox/limits_report.h"


namespace agentbox::tools {

namespace {

json status_of(sandbox::Manager* manager, const std::string& conversation) {
  json status = {{"conversation", conversation}, {"sandbox", nullptr}, {"state", "none"},
                 {"sessions", json::array()},    {"processes", json::array()}, {"workspace_bytes", 0},
                 {"last_snapshot", nullptr}};
  if (!manager) return status;
  status["limits"] = sandbox::sandbox_limits(*manager, nullptr);  // what a sandbox started now gets
  // The catalog knows sandboxes this server has not started (stopped at idle,
  // or left by an earlier server); the status never starts or restores one.
  auto record = manager->record(conversation);
  if (!record) return status;
  status["sandbox"] = record->id;
  status["state"] = record->state == "active" ? "stopped" : record->state;
  auto snapshots = manager->snapshots(conversation);
  if (!snapshots.empty()) status["last_snapshot"] = snapshot_json(snapshots.front());
  for (const auto& s : manager->catalog().sessions(record->id)) status["sessions"].push_back(s.name);
  auto sandbox = manager->find(conversation);
  if (!sandbox) return status;
  std::string state = sandbox->state();
  if (state != "stopped" || record->state != "stopped") status["state"] = state;
  if (state != "stopped") status["workspace_bytes"] = sandbox->workspace_bytes();
  if (state == "active") status["limits"] = sandbox::sandbox_limits(*manager, sandbox.get());  // what it took
  if (auto disk = sandbox::disk_usage(sandbox->dirs().root))  // its own filesystem (sandbox/disk.h)
    status["workspace_limit_bytes"] = manager->disks().options().bytes, status["workspace_inodes"] = disk->used_inodes;
  auto client = sandbox->client();
  if (client && client->alive() && state == "active") {
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

// What holds the workspace: its limit, or why there is none.
std::string workspace_limit_text(sandbox::Manager* manager, const json& status) {
  if (status.contains("workspace_limit_bytes"))
    return " of " + sandbox::size_text(status["workspace_limit_bytes"].get<std::uint64_t>()) + " (" +
           std::to_string(status.value("workspace_inodes", 0)) + " inodes used)";
  if (!manager || status["sandbox"].is_null()) return "";
  const auto& support = manager->disks().support();
  return support.enabled ? " (no limit: plain directories from before the limit)" : " (" + support.detail + ")";
}

}  // namespace

void register_sandbox_tools(Registry& registry, const Services& services) {
  registry.add("sandbox_status", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    run_blocking([services, context, reply] {
      sandbox::Manager* manager = nullptr;
      if (services.sandboxes && !(manager = manager_or_reply(services, reply))) return;
      json status = status_of(manager, context->conversation());
      std::string text = status["sandbox"].is_null()
                             ? "Conversation '" + context->conversation() +
                                   "' has no sandbox yet; the first command or file call starts one."
                             : "Sandbox " + status["sandbox"].get<std::string>() + " is " +
                                   status["state"].get<std::string>() + "; sessions: " + status["sessions"].dump() +
                                   "; processes: " + status["processes"].dump() + "; workspace " +
                                   std::to_string(status["workspace_bytes"].get<std::uint64_t>()) + " bytes" +
                                   workspace_limit_text(manager, status) +
                                   (status["last_snapshot"].is_null()
                                        ? "; no snapshot"
                                        : "; last snapshot " + status["last_snapshot"]["snapshot"].get<std::string>() +
                                              " at " + status["last_snapshot"]["created_at"].get<std::string>());
      reply(ToolResult::ok(status, text));
    });
  });
  registry.add("sandbox_destroy", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Manager* manager = manager_or_reply(services, reply);
    if (!manager) return;
    bool keep = args.value("keep_snapshots", false);
    run_blocking([manager, context, reply, keep] {
      try {
        auto record = manager->record(context->conversation());
        json id = record ? json(record->id) : json(nullptr);
        std::size_t kept = keep ? manager->snapshots(context->conversation()).size() : 0;
        bool destroyed = manager->destroy(context->conversation(), keep);
        std::string text = !destroyed ? "There was no sandbox to destroy."
                           : keep     ? "Destroyed the sandbox and its files; kept " + std::to_string(kept) +
                                        " snapshot(s), which sandbox_restore can bring back."
                                      : "Destroyed the sandbox, its files and its snapshots.";
        reply(ToolResult::ok({{"destroyed", destroyed}, {"sandbox", id}, {"snapshots_kept", kept}}, text));
      } catch (const sandbox::SandboxError& e) {
        reply(error_result(e));
      }
    });
  });
}

}  // namespace agentbox::tools
