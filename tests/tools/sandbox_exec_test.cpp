// exec (tools/exec_tool.cpp) in real sandboxes: the real Manager over a
// fresh state directory, bwrap and the test agent (label sandbox). Results
// checked against schemas/exec.json.
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

TEST_CASE("manager: exec runs a command; a non-zero exit is a result, not an error", "[tools][exec][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto context = std::make_shared<TestContext>("test");
  auto ok = tools.call("exec", {{"command", "echo hello; echo oops >&2"}}, context);
  CHECK(tools.wrong_shape("exec", ok) == "");
  CHECK_FALSE(ok.is_error);
  CHECK(ok.structured["stdout"] == "hello\n");
  CHECK(ok.structured["success"] == true);
  CHECK(ok.text.rfind("hello\n[stderr]\noops\n[exit code 0, ", 0) == 0);
  CHECK_FALSE(ok.structured.contains("notice"));

  auto failed = tools.call("exec", {{"command", "(exit 3)"}});
  INFO(failed.text);
  CHECK(tools.wrong_shape("exec", failed) == "");
  CHECK_FALSE(failed.is_error);
  CHECK(failed.structured["exit_code"] == 3);
  CHECK(failed.structured["success"] == false);
  CHECK(failed.text.rfind("[exit code 3, ", 0) == 0);
}

TEST_CASE("manager: exec's timeout is clamped to the server's maximum", "[tools][exec][manager]") {
  sandbox::Limits limits;
  limits.max_timeout = std::chrono::milliseconds(1500);
  ManagerFixture real(limits);
  ToolHarness tools(real.sandboxes.get());
  auto result = tools.call("exec", {{"command", "sleep 30"}, {"timeout_ms", 600'000}});
  INFO(result.text);
  CHECK(tools.wrong_shape("exec", result) == "");
  CHECK(result.structured["timed_out"] == true);
  CHECK(result.structured["exit_code"] == 124);
  CHECK(result.structured["duration_ms"].get<int>() < 10'000);
  CHECK(result.text.find(", timed out, ") != std::string::npos);
}

TEST_CASE("manager: exec that cannot run is an error result with the agent's code", "[tools][exec][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto session = tools.call("exec", {{"command", "true"}, {"session", "nope"}});
  CHECK(tools.wrong_shape("exec", session) == "");
  CHECK(error_code(session) == "SESSION_NOT_FOUND");
  auto cwd = tools.call("exec", {{"command", "true"}, {"cwd", "/workspace/missing"}});
  CHECK(tools.wrong_shape("exec", cwd) == "");
  CHECK(error_code(cwd) == "INVALID_CWD");
}

TEST_CASE("manager: after a sandbox restart the next result says what was lost", "[tools][exec][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  REQUIRE(tools.call("exec", {{"command", "true"}}).structured["success"] == true);
  real.sandboxes->acquire("test", {})->agent()->reject("ended by the test");
  auto after = tools.call("exec", {{"command", "echo back"}});
  INFO(after.text);
  CHECK(tools.wrong_shape("exec", after) == "");
  REQUIRE(after.structured.contains("notice"));
  CHECK(after.structured["notice"].get<std::string>().find(" and was restarted: running processes are gone") !=
        std::string::npos);
  CHECK(after.text.rfind("Note: this conversation's sandbox had stopped (", 0) == 0);
  CHECK(after.structured["stdout"] == "back\n");
}
