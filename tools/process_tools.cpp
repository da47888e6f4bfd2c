// Background processes: process_start, process_list, process_output,
// process_wait, process_kill, process_write (agent side in
// agent/processes.h). Waiting calls get server-side timeouts a little
// longer than their own wait.
#include "tools/sandbox_call.h"

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;
constexpr milliseconds kSlack{30'000};

std::string status_line(const json& r) {
  std::string text = r.value("process_id", "") + ": " + r.value("status", "");
  if (r.contains("exit_code") && !r["exit_code"].is_null()) text += " (exit code " + std::to_string(r["exit_code"].get<int>()) + ")";
  if (r.contains("signal")) text += " by " + r["signal"].get<std::string>();
  return text;
}

// The last line says where the next page starts (docs/files.md, "What hosts
// show"); the agent keeps a page within the inline cap and 1,000 lines.
std::string output_text(const json& r) {
  std::string text = r.value("stdout", "");
  if (!r.value("stderr", "").empty()) text += (text.empty() || text.back() == '\n' ? "" : "\n") + std::string("[stderr]\n") + r.value("stderr", "");
  if (!text.empty() && text.back() != '\n') text += '\n';
  std::string out = std::to_string(r.value("next_offset", 0)), err = std::to_string(r.value("stderr_next_offset", 0));
  text += "[" + status_line(r) + "; stdout read to byte " + out + " of " + std::to_string(r.value("stdout_bytes", 0)) +
          ", stderr to " + err + " of " + std::to_string(r.value("stderr_bytes", 0));
  if (r.value("complete", false)) return text + "; all output read]";
  return text + "; next: process_output process_id " + json(r.value("process_id", "")).dump() + " offset " + out +
         " stderr_offset " + err + "]";
}

milliseconds fixed(const json&) { return milliseconds(60'000); }

// A wall-clock time the agent sent in milliseconds, taken out of the result.
std::optional<std::chrono::system_clock::time_point> unix_time(json& r, const char* key) {
  auto found = r.find(key);
  if (found == r.end()) return std::nullopt;
  std::optional<std::chrono::system_clock::time_point> at;
  // Below 9e12 ms (year 2255): a system_clock time point holds it in nanoseconds.
  if (found->is_number_integer() && found->get<std::int64_t>() > 0 && found->get<std::int64_t>() < 9'000'000'000'000)
    at = std::chrono::system_clock::time_point(milliseconds(found->get<std::int64_t>()));
  r.erase(found);
  return at;
}

}  // namespace

void register_process_tools(Registry& registry, const Services& services) {
  bind_agent_tool(registry, services, "process_start", "process.start", fixed, [](const json& r) {
    return ToolResult::ok(r, "Started " + r.value("process_id", "") + " (pid " + std::to_string(r.value("pid", 0)) + ")");
  });
  registry.keep_session_order("process_start");
  bind_agent_tool(registry, services, "process_list", "process.list", fixed, [](const json& r) {
    std::string text;
    for (const auto& p : agent_array(r, "processes"))
      text += status_line(p) + "  " + p.value("command", "") + (p.value("command_truncated", false) ? " [...]" : "") + "\n";
    if (text.empty()) text = "No background processes.";
    if (r.value("truncated", false))
      text += "[" + std::to_string(agent_array(r, "processes").size()) + " processes shown; next: process_list cursor " +
              r.value("next_cursor", json("")).dump() + "]";
    return ToolResult::ok(r, text);
  });
  registry.add("process_output", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    AgentCall call{"process.output", agent_params(args), milliseconds(args.value("wait_ms", 0)) + kSlack};
    call_agent(services, context, reply, std::move(call), [sandboxes, conversation = context->conversation()](json r) {
      // The span the process ran in, as the box says: it can only move
      // which of its own denials it is shown.
      auto started = unix_time(r, "started_unix_ms"), ended = unix_time(r, "ended_unix_ms");
      std::string text = output_text(r);
      if (started) add_network_denials(r, text, *sandboxes, conversation, *started,
                                       ended ? *ended : std::chrono::system_clock::time_point::max());
      else r.erase("network_denied");
      return ToolResult::ok(r, text);
    });
  });
  bind_agent_tool(registry, services, "process_wait", "process.wait",
       [](const json& a) { return milliseconds(a.value("timeout_ms", 30'000)) + kSlack; },
       [](const json& r) {
         std::string text = status_line(r);
         if (r.value("timed_out", false)) text += " — still running after the timeout";
         if (r.value("port_ready", false)) text += " — port is accepting connections";
         return ToolResult::ok(r, text);
       });
  bind_agent_tool(registry, services, "process_kill", "process.kill", fixed,
       [](const json& r) { return ToolResult::ok(r, status_line(r)); });
  bind_agent_tool(registry, services, "process_write", "process.write", fixed, [](const json& r) {
    return ToolResult::ok(r, "Wrote " + std::to_string(r.value("bytes_written", 0)) + " bytes");
  });
}

}  // namespace agentbox::tools
