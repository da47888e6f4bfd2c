// The agent-backed tools (exec, file_*, process_*, session_*) before they
// reach an agent: how they are bound (tools/sandbox_call.h bind_agent_tool),
// and what a caller gets when there is no sandbox to call. "fake sandboxes:"
// tests use fake_sandboxes.h; calls into a real sandbox are in
// tools_sandbox_tests (sandbox_*_test.cpp).
#include "fake_sandboxes.h"
#include "harness.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

namespace {

const std::vector<std::pair<std::string, json>> kAgentCalls = {
    {"exec", {{"command", "true"}}},
    {"file_read", {{"path", "a"}}},
    {"file_write", {{"path", "a"}, {"content", "x"}}},
    {"file_list", json::object()},
    {"file_search", {{"pattern", "x"}}},
    {"process_start", {{"command", "true"}}},
    {"process_list", json::object()},
    {"process_wait", {{"process_id", "p1"}}},
    {"session_create", json::object()},
    {"session_list", json::object()},
    {"session_delete", {{"session", "s"}}},
};

}  // namespace

TEST_CASE("no sandboxes: every agent-backed tool answers SANDBOX_UNAVAILABLE", "[tools][agent]") {
  ToolHarness tools(nullptr);
  for (const auto& [tool, args] : kAgentCalls) {
    INFO(tool);
    auto result = tools.call(tool, args);
    CHECK(tools.wrong_shape(tool, result) == "");
    CHECK(error_code(result) == "SANDBOX_UNAVAILABLE");
    CHECK(result.text == "SANDBOX_UNAVAILABLE: this server was started without sandbox support");
  }
}

TEST_CASE("fake sandboxes: a sandbox that cannot be had is the call's error result", "[tools][agent][fake]") {
  FakeSandboxes fake;
  fake.error = SandboxError(codes::kSandboxBusy, "another server drives this sandbox; waited 10 s");
  ToolHarness tools(&fake);
  for (const auto& [tool, args] : kAgentCalls) {
    INFO(tool);
    fake.calls.clear();
    json with = args;
    with["conversation"] = "c1";
    auto result = tools.call(tool, with);
    CHECK(tools.wrong_shape(tool, result) == "");
    CHECK(error_code(result) == "SANDBOX_BUSY");
    // The quick path first (never blocks), then a thread of its own that waits.
    CHECK(fake.calls == std::vector<std::string>{"try_acquire c1", "acquire c1"});
  }
}

TEST_CASE("fake sandboxes: which calls keep their session's order and which may run inline", "[tools][agent][fake]") {
  FakeSandboxes fake;
  ToolHarness tools(&fake);
  for (const char* tool : {"exec", "process_start", "file_read", "file_write", "file_edit", "file_list", "file_stat",
                           "file_mkdir", "file_delete", "file_move", "file_search"})
    CHECK(tools.registry.keeps_session_order(tool));
  for (const char* tool : {"process_list", "process_output", "process_wait", "process_kill", "process_write",
                           "session_create", "session_list", "session_delete", "sandbox_status", "sandbox_destroy",
                           "sandbox_snapshot", "sandbox_restore", "snapshot_list"})
    CHECK_FALSE(tools.registry.keeps_session_order(tool));
  // File calls the agent answers on its reader thread, with content that
  // fits its pipe, may run on the server's stdin thread; nothing else.
  CHECK(tools.registry.runs_inline("file_read", {{"path", "a"}}));
  CHECK(tools.registry.runs_inline("file_write", {{"path", "a"}, {"content", std::string(1000, 'x')}}));
  CHECK_FALSE(tools.registry.runs_inline("file_write", {{"path", "a"}, {"content", std::string(300 << 10, 'x')}}));
  CHECK_FALSE(tools.registry.runs_inline("exec", {{"command", "true"}}));
  CHECK_FALSE(tools.registry.runs_inline("process_list", json::object()));
  bool ready = false;
  tools.services.sandboxes_ready = [&ready] { return ready; };
  Registry before_start;
  register_all(before_start, tools.services);
  CHECK_FALSE(before_start.runs_inline("file_read", {{"path", "a"}}));  // the manager is still starting
  ready = true;
  CHECK(before_start.runs_inline("file_read", {{"path", "a"}}));
}
