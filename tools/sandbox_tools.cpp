// Sandbox-level tools: sandbox_status (never starts a sandbox) and
// sandbox_destroy.
#include "tools/sandbox_call.h"


namespace agentbox::tools {

namespace {

using persistence::SandboxState;
using persistence::state_name;

// A catalog state in sandbox_status's vocabulary (its output schema's enum).
// Stored Active is a workspace some server left on disk; not running here, it
// is stopped as far as this server knows. A destroy that keeps the snapshots
// (Clearing) ends in None; a state another version stored is "unknown" (its
// word in stored_state).
std::string shown_state(SandboxState stored) {
  switch (stored) {
    case SandboxState::Active: return std::string(state_name(SandboxState::Stopped));
    case SandboxState::Clearing:
    case SandboxState::Destroying: return std::string(state_name(SandboxState::None));
    default: return std::string(state_name(stored));
  }
}

// The status never starts or restores a sandbox. view is null on a server
// without sandboxes.
json status_of(const sandbox::SandboxView* view, const std::string& conversation) {
  json status = {{"conversation", conversation}, {"sandbox", nullptr}, {"state", state_name(SandboxState::None)},
                 {"sessions", json::array()},    {"processes", json::array()}, {"workspace_bytes", 0},
                 {"last_snapshot", nullptr}};
  if (!view) return status;
  status["limits"] = view->limits;
  if (view->sandbox.empty()) return status;
  status["sandbox"] = view->sandbox;
  status["state"] = shown_state(view->catalog_state);
  if (view->catalog_state == SandboxState::Unknown) status["stored_state"] = view->catalog_state_text;
  if (view->last_snapshot) status["last_snapshot"] = snapshot_json(*view->last_snapshot);
  for (const auto& name : view->sessions) status["sessions"].push_back(name);
  if (!view->running) return status;
  const auto& running = *view->running;
  if (running.state != SandboxState::Stopped || view->catalog_state != SandboxState::Stopped)
    status["state"] = state_name(running.state);
  if (running.state != SandboxState::Stopped) status["workspace_bytes"] = running.workspace_bytes;
  if (running.state == SandboxState::Active) status["limits"] = running.limits;
  if (running.disk_limit_bytes)
    status["workspace_limit_bytes"] = *running.disk_limit_bytes, status["workspace_inodes"] = running.disk_inodes;
  if (running.agent_status && running.state == SandboxState::Active) {
    try {
      json agent = running.agent_status();
      status["sessions"] = agent.value("sessions", json::array());
      status["processes"] = agent.value("processes", json::array());
    } catch (const SandboxError& e) {
      status["state"] = state_name(SandboxState::Failed);
      status["error"] = {{"code", e.code()}, {"message", e.what()}};
    }
  }
  return status;
}

// What holds the workspace: its limit, or why there is none.
std::string workspace_limit_text(const sandbox::SandboxView* view, const json& status) {
  if (status.contains("workspace_limit_bytes"))
    return " of " + sandbox::size_text(status["workspace_limit_bytes"].get<std::uint64_t>()) + " (" +
           std::to_string(status.value("workspace_inodes", 0)) + " inodes used)";
  if (!view || status["sandbox"].is_null()) return "";
  return view->disks.enabled ? " (no limit: plain directories from before the limit)" : " (" + view->disks.detail + ")";
}

std::string status_text(const sandbox::SandboxView* view, const json& status, const std::string& conversation) {
  if (status["sandbox"].is_null())
    return "Conversation '" + conversation + "' has no sandbox yet; the first command or file call starts one.";
  std::string state = status["state"].get<std::string>();
  if (status.contains("stored_state"))
    state += " (stored as '" + status["stored_state"].get<std::string>() + "' by another version of agentbox)";
  return "Sandbox " + status["sandbox"].get<std::string>() + " is " + state +
         "; sessions: " + status["sessions"].dump() + "; processes: " + status["processes"].dump() + "; workspace " +
         std::to_string(status["workspace_bytes"].get<std::uint64_t>()) + " bytes" +
         workspace_limit_text(view, status) +
         (status["last_snapshot"].is_null()
              ? "; no snapshot"
              : "; last snapshot " + status["last_snapshot"]["snapshot"].get<std::string>() + " at " +
                    status["last_snapshot"]["created_at"].get<std::string>());
}

}  // namespace

void register_sandbox_tools(Registry& registry, const Services& services) {
  registry.add("sandbox_status", [services](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    run_blocking([services, context, reply] {
      std::optional<sandbox::SandboxView> view;
      if (services.sandboxes) {
        sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
        if (!sandboxes) return;
        view = sandboxes->status(context->conversation());
      }
      const sandbox::SandboxView* seen = view ? &*view : nullptr;
      json status = status_of(seen, context->conversation());
      std::string text = status_text(seen, status, context->conversation());
      reply(ToolResult::ok(std::move(status), std::move(text)));
    });
  });
  registry.add("sandbox_destroy", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    bool keep = args.value("keep_snapshots", false);
    run_blocking([sandboxes, context, reply, keep] {
      try {
        auto done = sandboxes->destroy(context->conversation(), keep);
        std::string text = !done.destroyed ? "There was no sandbox to destroy."
                           : keep ? "Destroyed the sandbox and its files; kept " + std::to_string(done.snapshots_kept) +
                                        " snapshot(s), which sandbox_restore can bring back."
                                  : "Destroyed the sandbox, its files and its snapshots.";
        json id = done.sandbox.empty() ? json(nullptr) : json(done.sandbox);
        reply(ToolResult::ok({{"destroyed", done.destroyed}, {"sandbox", id}, {"snapshots_kept", done.snapshots_kept}},
                             text));
      } catch (const SandboxError& e) {
        reply(error_result(e));
      }
    });
  });
}

}  // namespace agentbox::tools
