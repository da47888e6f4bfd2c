// Terminals: terminal_start, terminal_write, terminal_read, terminal_resize,
// terminal_kill, terminal_list (agent side in agent/terminals.h; the screen
// is rendered inside the box, docs/terminals.md). The text a model reads is
// the screen under a status line; the raw output, escape sequences and all,
// is in structuredContent.
#include "tools/sandbox_call.h"

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;
constexpr milliseconds kSlack{30'000};

milliseconds fixed(const json&) { return milliseconds(60'000); }
milliseconds waiting(const json& a) {
  const json& wait = a.contains("wait_ms") ? a["wait_ms"] : json();
  return milliseconds(wait.is_number_integer() ? wait.get<std::int64_t>() : 0) + kSlack;
}

std::string status_line(const json& r) {
  std::string text = r.value("terminal_id", "") + ": " + r.value("status", "");
  if (r.contains("exit_code") && r["exit_code"].is_number_integer())
    text += " (exit code " + std::to_string(r["exit_code"].get<int>()) + ")";
  if (r.contains("signal") && r["signal"].is_string()) text += " by " + r["signal"].get<std::string>();
  return text;
}

// The status line, the screen, and where to read on.
ToolResult view(const json& r, std::string first) {
  std::string text = std::move(first);
  text += status_line(r);
  if (r.contains("cols") && r.contains("rows") && r["cols"].is_number() && r["rows"].is_number())
    text += ", " + std::to_string(r["cols"].get<int>()) + "x" + std::to_string(r["rows"].get<int>());
  const json& at = r.contains("screen_cursor") ? r["screen_cursor"] : json();
  if (at.is_object() && at.value("row", json()).is_number() && at.value("col", json()).is_number())
    text += ", cursor at row " + std::to_string(at["row"].get<int>()) + " column " + std::to_string(at["col"].get<int>());
  if (r.contains("matched") && r["matched"].is_boolean()) text += r["matched"].get<bool>() ? ", pattern matched" : ", pattern not seen";
  text += "\n--- screen ---\n" + r.value("screen", "") + "\n--- end of screen";
  if (r.value("screen_truncated", false)) text += " (cut to fit)";
  text += " ---\n[output read to byte " + std::to_string(r.value("next_cursor", 0)) + " of " +
          std::to_string(r.value("output_bytes", 0)) + "; next: terminal_read terminal_id " +
          json(r.value("terminal_id", "")).dump() + " cursor " + std::to_string(r.value("next_cursor", 0)) + "]";
  return ToolResult::ok(r, text);
}

}  // namespace

void register_terminal_tools(Registry& registry, const Services& services) {
  bind_agent_tool(registry, services, "terminal_start", "terminal.start", fixed, [](const json& r) {
    return ToolResult::ok(r, "Started " + r.value("terminal_id", "") + " (pid " + std::to_string(r.value("pid", 0)) + ", " +
                                 std::to_string(r.value("cols", 0)) + "x" + std::to_string(r.value("rows", 0)) +
                                 "); terminal_read shows its screen");
  });
  registry.keep_session_order("terminal_start");
  bind_agent_tool(registry, services, "terminal_write", "terminal.write", waiting, [](const json& r) {
    return view(r, "Wrote " + std::to_string(r.value("bytes_written", 0)) + " bytes. ");
  });
  bind_agent_tool(registry, services, "terminal_read", "terminal.read", waiting, [](const json& r) { return view(r, ""); });
  bind_agent_tool(registry, services, "terminal_resize", "terminal.resize", fixed, [](const json& r) {
    return ToolResult::ok(r, status_line(r) + ", now " + std::to_string(r.value("cols", 0)) + "x" + std::to_string(r.value("rows", 0)));
  });
  bind_agent_tool(registry, services, "terminal_kill", "terminal.kill", fixed,
                  [](const json& r) { return ToolResult::ok(r, status_line(r)); });
  bind_agent_tool(registry, services, "terminal_list", "terminal.list", fixed, [](const json& r) {
    std::string text;
    for (const auto& t : agent_array(r, "terminals")) text += status_line(t) + "  " + t.value("command", "") + "\n";
    if (text.empty()) text = "No terminals.";
    return ToolResult::ok(r, text);
  });
}

}  // namespace agentbox::tools
