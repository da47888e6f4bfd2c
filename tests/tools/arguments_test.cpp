// Bad input to each tool is refused before any sandbox work, naming the
// field and what is wrong (docs/design.md section 8, "Argument errors"): the
// tools' schemas as registered by register_all, no sandboxes behind them.
#include "harness.h"

using namespace agentbox::tools;
using namespace agentbox::tools::test;

TEST_CASE("every tool is registered with a schema hosts accept", "[tools][arguments]") {
  ToolHarness tools(nullptr);
  auto definitions = tools.registry.definitions();
  // 26 + the six terminal_* tools, file_watch and file_changes (issue 16), code_run and code_context_* (issue 17)
  CHECK(definitions.size() == 41);  // 34 + port_expose/list/unexpose and the four code tools (issue 17)
  for (const auto& d : definitions) {
    INFO(d["name"]);
    CHECK(d.contains("outputSchema"));
    CHECK(d["inputSchema"]["type"] == "object");
    CHECK(d["inputSchema"]["properties"].contains("conversation"));  // every tool is sandbox-scoped
    CHECK(d["annotations"].is_object());
  }
}

TEST_CASE("a missing required argument is named", "[tools][arguments]") {
  ToolHarness tools(nullptr);
  CHECK(tools.invalid("exec", json::object()) == "arguments.command: is required");
  CHECK(tools.invalid("file_read", json::object()) == "arguments.path: is required");
  CHECK(tools.invalid("file_write", {{"path", "a"}}) == "arguments.content: is required");
  CHECK(tools.invalid("file_edit", {{"path", "a"}, {"old_string", "x"}}) == "arguments.new_string: is required");
  CHECK(tools.invalid("file_move", {{"from", "a"}}) == "arguments.to: is required");
  CHECK(tools.invalid("file_search", json::object()) == "arguments.pattern: is required");
  CHECK(tools.invalid("process_start", json::object()) == "arguments.command: is required");
  CHECK(tools.invalid("process_write", {{"process_id", "p1"}}) == "arguments.data: is required");
  CHECK(tools.invalid("process_kill", json::object()) == "arguments.process_id: is required");
  CHECK(tools.invalid("session_delete", json::object()) == "arguments.session: is required");
}

TEST_CASE("a value out of range, of the wrong type or not in the list is named with the rule", "[tools][arguments]") {
  ToolHarness tools(nullptr);
  CHECK(tools.invalid("exec", {{"command", "true"}, {"timeout_ms", 0}}) ==
        "arguments.timeout_ms: must be greater than or equal to 1");
  CHECK(tools.invalid("exec", {{"command", "true"}, {"timeout_ms", 3'600'001}}) ==
        "arguments.timeout_ms: must be less than or equal to 3600000");
  CHECK(tools.invalid("exec", {{"command", ""}}) == "arguments.command: must not be empty");
  CHECK(tools.invalid("exec", {{"command", "true"}, {"env", {{"A", 1}}}}) == "arguments.env.A: must be of type \"string\"");
  CHECK(tools.invalid("file_write", {{"path", "a"}, {"content", ""}, {"mode", "truncate"}}) ==
        "arguments.mode: must be one of \"overwrite\", \"append\", \"create\"");
  CHECK(tools.invalid("file_read", {{"path", "a"}, {"encoding", "latin1"}}) ==
        "arguments.encoding: must be one of \"utf-8\", \"base64\"");
  CHECK(tools.invalid("file_read", {{"path", "a"}, {"offset", -1}}) == "arguments.offset: must be greater than or equal to 0");
  CHECK(tools.invalid("process_wait", {{"process_id", "p"}, {"port", 70000}}) ==
        "arguments.port: must be less than or equal to 65535");
  CHECK(tools.invalid("session_create", {{"name", "a b"}}) == "arguments.name: must match \"^[A-Za-z0-9_.-]+$\"");
  CHECK(tools.invalid("sandbox_destroy", {{"keep_snapshots", "yes"}}) ==
        "arguments.keep_snapshots: must be of type \"boolean\"");
  CHECK(tools.invalid("sandbox_snapshot", {{"label", ""}}) == "arguments.label: must not be empty");
  CHECK(tools.invalid("snapshot_list", {{"cursor", ""}}) == "arguments.cursor: must not be empty");
}

TEST_CASE("session only where a tool runs in one; unknown arguments are refused", "[tools][arguments]") {
  ToolHarness tools(nullptr);
  CHECK(tools.invalid("exec", {{"command", "true"}, {"session", "s"}}).empty());
  CHECK(tools.invalid("file_read", {{"path", "a"}, {"session", "s"}}).empty());
  CHECK(tools.invalid("process_start", {{"command", "true"}, {"session", "s"}}).empty());
  for (const char* tool : {"sandbox_status", "sandbox_destroy", "snapshot_list", "sandbox_snapshot"}) {
    INFO(tool);
    CHECK(tools.invalid(tool, {{"session", "s"}}) == "arguments.session: is not a known argument");
  }
  CHECK(tools.invalid("file_stat", {{"path", "a"}, {"paht", "b"}}) == "arguments.paht: is not a known argument");
  CHECK(tools.invalid("exec", {{"command", "true"}, {"conversation", ""}}) == "arguments.conversation: must not be empty");
}
