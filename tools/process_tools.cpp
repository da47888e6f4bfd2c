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
  bind_agent_tool(registry, services, "process_output", "process.output",
       [](const json& a) { return milliseconds(a.value("wait_ms", 0)) + kSlack; },
       [](const json& r) { return ToolResult::ok(r, output_text(r)); });
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
