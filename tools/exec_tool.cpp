// The exec tool: one command in a session of the conversation's sandbox.
// The agent enforces the timeout and kills the command's tree; the server
// waits a little longer than that before it gives up on the agent itself.
#include "tools/sandbox_call.h"

namespace agentbox::tools {

namespace {

constexpr std::chrono::seconds kAgentSlack{30};

// The status line comes last, with the way to the cut output when there is
// one: hosts that cut a long text keep its head (opencode, 2,000 lines) or
// its head and tail (Codex, 12 KB), and the agent keeps the text within
// 1,000 lines (docs/files.md, "What hosts show").
std::string exec_text(const json& r) {
  std::string text = r.value("stdout", "");
  std::string err = r.value("stderr", "");
  if (!err.empty()) {
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += "[stderr]\n" + err;
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (r.value("running", false)) {
    // exec {yield_ms}: the command goes on as a process.
    std::string id = json(r.value("process_id", "")).dump();
    return text + "[still running after " + std::to_string(r.value("duration_ms", 0)) + " ms as process " + id +
           "; next: process_output process_id " + id + " offset " + std::to_string(r.value("next_offset", 0)) +
           " stderr_offset " + std::to_string(r.value("stderr_next_offset", 0)) +
           " (wait_ms to wait), process_wait for its end, process_kill to stop it. Its session runs nothing else "
           "until it ends]";
  }
  if (r.contains("notice")) text += r["notice"].get<std::string>() + "\n";
  text += "[exit code " + std::to_string(r.value("exit_code", -1));
  if (r.contains("signal")) text += " (" + r["signal"].get<std::string>() + ")";
  if (r.value("timed_out", false)) text += ", timed out";
  text += ", " + std::to_string(r.value("duration_ms", 0)) + " ms";
  if (r.contains("process_id")) {
    text += "; output cut: stdout " + std::to_string(r.value("stdout_bytes", 0)) + " bytes, stderr " +
            std::to_string(r.value("stderr_bytes", 0)) + "; next: process_output process_id " +
            json(r.value("process_id", "")).dump() + " offset " + std::to_string(r.value("next_offset", 0)) +
            " stderr_offset " + std::to_string(r.value("stderr_next_offset", 0));
  }
  text += "]";
  return text;
}

}  // namespace

void register_exec_tool(Registry& registry, const Services& services) {
  registry.add("exec", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    const auto& limits = sandboxes->limits();
    auto timeout = std::chrono::milliseconds(args.value("timeout_ms", static_cast<std::int64_t>(limits.default_timeout.count())));
    timeout = std::clamp(timeout, std::chrono::milliseconds(1), limits.max_timeout);
    AgentCall call{"exec", agent_params(args), timeout + kAgentSlack, true};
    call.params["timeout_ms"] = timeout.count();
    call.params["stream"] = true;
    auto started = std::chrono::system_clock::now();
    call_agent(services, context, reply, std::move(call),
               [sandboxes, conversation = context->conversation(), started](json r) {
                 std::string text = exec_text(r);
                 add_network_denials(r, text, *sandboxes, conversation, started);
                 return ToolResult::ok(r, text);
               });
  });
  registry.keep_session_order("exec");
}

}  // namespace agentbox::tools
