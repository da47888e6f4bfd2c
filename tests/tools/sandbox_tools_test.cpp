// sandbox_status and sandbox_destroy (tools/sandbox_tools.cpp): what they
// make of the sandbox layer's answer. "fake sandboxes:" tests feed the tool
// a view (fake_sandboxes.h); "manager:" tests use the real Manager over a
// fresh state directory, for calls that start no sandbox.
#include "fake_sandboxes.h"
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

namespace {

sandbox::SandboxView stopped_view() {
  sandbox::SandboxView view;
  view.sandbox = "sb1";
  view.catalog_state = persistence::SandboxState::Stopped;
  view.catalog_state_text = "stopped";
  view.sessions = {"default", "build"};
  view.last_snapshot = snapshot_record("snap1");
  view.disks = {true, "its own 10 GiB filesystem"};
  view.limits = {{"memory", {{"bytes", 1024}, {"enforced", "per-process"}}}};
  return view;
}

}  // namespace

TEST_CASE("no sandboxes: sandbox_status says none, the others SANDBOX_UNAVAILABLE", "[tools][status]") {
  ToolHarness tools(nullptr);
  auto status = tools.call("sandbox_status", {{"conversation", "c1"}});
  CHECK(tools.wrong_shape("sandbox_status", status) == "");
  CHECK(status.structured["state"] == "none");
  CHECK(status.structured["conversation"] == "c1");
  CHECK(status.text == "Conversation 'c1' has no sandbox yet; the first command or file call starts one.");
  for (const char* tool : {"sandbox_destroy", "snapshot_list", "sandbox_snapshot", "sandbox_restore", "session_list"}) {
    INFO(tool);
    auto result = tools.call(tool);
    CHECK(tools.wrong_shape(tool, result) == "");
    CHECK(error_code(result) == "SANDBOX_UNAVAILABLE");
  }
}

TEST_CASE("a manager that could not start: its error, for sandbox_status too", "[tools][status]") {
  ToolHarness tools(SandboxError(codes::kSandboxStartFailed, "sandboxes are unavailable: no catalog"));
  for (const char* tool : {"sandbox_status", "sandbox_destroy", "snapshot_list"}) {
    auto result = tools.call(tool);
    CHECK(tools.wrong_shape(tool, result) == "");
    CHECK(error_code(result) == "SANDBOX_START_FAILED");
    CHECK(result.text == "SANDBOX_START_FAILED: sandboxes are unavailable: no catalog");
  }
}

TEST_CASE("fake sandboxes: a sandbox the catalog has and this server does not run", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  fake.view.catalog_state = persistence::SandboxState::Active;  // left active by a server that died
  fake.view.catalog_state_text = "active";
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_status", {{"conversation", "c1"}});
  CHECK(tools.wrong_shape("sandbox_status", result) == "");
  const json& s = result.structured;
  CHECK(s["sandbox"] == "sb1");
  CHECK(s["state"] == "stopped");
  CHECK(s["sessions"] == json({"default", "build"}));
  CHECK(s["processes"] == json::array());
  CHECK(s["last_snapshot"]["snapshot"] == "snap1");
  CHECK(s["last_snapshot"]["label"].is_null());
  CHECK_FALSE(s.contains("workspace_limit_bytes"));
  CHECK(s["limits"] == fake.view.limits);  // what a sandbox started now gets
  CHECK(result.text == "Sandbox sb1 is stopped; sessions: [\"default\",\"build\"]; processes: []; workspace 0 bytes "
                       "(no limit: plain directories from before the limit); last snapshot snap1 at 2026-12-01T10:00:00Z");
  CHECK(fake.calls == std::vector<std::string>{"status c1"});
}

TEST_CASE("fake sandboxes: a state another version stored is shown as stored", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  fake.view.catalog_state = persistence::SandboxState::Unknown;
  fake.view.catalog_state_text = "hibernating";
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_status", {{"conversation", "c1"}});
  CHECK(tools.wrong_shape("sandbox_status", result) == "");
  CHECK(result.structured["state"] == "unknown");
  CHECK(result.structured["stored_state"] == "hibernating");
  CHECK(result.text.find("is unknown (stored as 'hibernating' by another version of agentbox)") != std::string::npos);
}

TEST_CASE("fake sandboxes: a destroy another server left half done shows no sandbox state", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  fake.view.catalog_state = persistence::SandboxState::Clearing;  // a destroy keeping the snapshots
  fake.view.catalog_state_text = "clearing";
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_status", {{"conversation", "c1"}});
  CHECK(tools.wrong_shape("sandbox_status", result) == "");
  CHECK(result.structured["state"] == "none");
}

TEST_CASE("fake sandboxes: a running sandbox lists its agent's sessions and processes", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  fake.view.last_snapshot.reset();
  auto& running = fake.view.running.emplace();
  running.state = persistence::SandboxState::Active;
  running.workspace_bytes = 4096;
  running.disk_limit_bytes = 10ull << 30;
  running.disk_inodes = 17;
  running.agent_status = [] { return json{{"sessions", {"default"}}, {"processes", {"p1", "p2"}}}; };
  running.limits = {{"memory", {{"bytes", 2048}, {"enforced", "cgroup"}}}};
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_status");
  CHECK(tools.wrong_shape("sandbox_status", result) == "");
  const json& s = result.structured;
  CHECK(s["state"] == "active");
  CHECK(s["sessions"] == json({"default"}));
  CHECK(s["processes"] == json({"p1", "p2"}));
  CHECK(s["workspace_bytes"] == 4096);
  CHECK(s["workspace_limit_bytes"] == 10ull << 30);
  CHECK(s["workspace_inodes"] == 17);
  CHECK(s["limits"] == running.limits);  // what its cgroup took
  CHECK(result.text == "Sandbox sb1 is active; sessions: [\"default\"]; processes: [\"p1\",\"p2\"]; workspace 4096 bytes "
                       "of 10 GiB (17 inodes used); no snapshot");
}

TEST_CASE("fake sandboxes: an agent that fails its status call shows the sandbox failed", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  fake.view.disks = {false, "no own filesystem: not root"};
  auto& running = fake.view.running.emplace();
  running.state = persistence::SandboxState::Active;
  running.limits = fake.view.limits;
  running.agent_status = []() -> json {
    throw SandboxError(codes::kAgentTimeout, "the agent did not answer within 10 s");
  };
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_status");
  CHECK(tools.wrong_shape("sandbox_status", result) == "");
  CHECK_FALSE(result.is_error);  // the status itself worked
  CHECK(result.structured["state"] == "failed");
  CHECK(result.structured["error"] == json{{"code", "AGENT_TIMEOUT"}, {"message", "the agent did not answer within 10 s"}});
  CHECK(result.structured["sessions"] == json({"default", "build"}));  // the catalog's, still
  CHECK(result.text.find("(no own filesystem: not root)") != std::string::npos);
}

TEST_CASE("fake sandboxes: a stopped sandbox is not asked, and a starting one keeps its state", "[tools][status][fake]") {
  FakeSandboxes fake;
  fake.view = stopped_view();
  bool asked = false;
  auto& running = fake.view.running.emplace();
  running.agent_status = [&asked] {
    asked = true;
    return json::object();
  };
  ToolHarness tools(&fake);
  running.state = persistence::SandboxState::Stopped;
  auto stopped = tools.call("sandbox_status");
  CHECK(stopped.structured["state"] == "stopped");
  CHECK_FALSE(asked);
  running.state = persistence::SandboxState::Restoring;
  running.workspace_bytes = 10;
  auto restoring = tools.call("sandbox_status");
  CHECK(tools.wrong_shape("sandbox_status", restoring) == "");
  CHECK(restoring.structured["state"] == "restoring");
  CHECK(restoring.structured["workspace_bytes"] == 10);
  CHECK(restoring.structured["limits"] == fake.view.limits);  // only an active sandbox's own
  CHECK_FALSE(asked);
}

TEST_CASE("fake sandboxes: sandbox_destroy says what it destroyed and kept", "[tools][destroy][fake]") {
  FakeSandboxes fake;
  ToolHarness tools(&fake);
  fake.destroyed = {true, "sb1", 3};
  auto kept = tools.call("sandbox_destroy", {{"conversation", "c1"}, {"keep_snapshots", true}});
  CHECK(tools.wrong_shape("sandbox_destroy", kept) == "");
  CHECK(kept.structured == json{{"destroyed", true}, {"sandbox", "sb1"}, {"snapshots_kept", 3}});
  CHECK(kept.text == "Destroyed the sandbox and its files; kept 3 snapshot(s), which sandbox_restore can bring back.");
  fake.destroyed = {true, "sb1", 0};
  auto all = tools.call("sandbox_destroy", {{"conversation", "c1"}});
  CHECK(all.text == "Destroyed the sandbox, its files and its snapshots.");
  CHECK(fake.calls == std::vector<std::string>{"destroy c1 keep", "destroy c1"});
  fake.error = SandboxError(codes::kSandboxBusy, "another server drives this sandbox");
  auto busy = tools.call("sandbox_destroy");
  CHECK(tools.wrong_shape("sandbox_destroy", busy) == "");
  CHECK(error_code(busy) == "SANDBOX_BUSY");
}

TEST_CASE("manager: status and destroy of a conversation that never had a sandbox", "[tools][status][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto status = tools.call("sandbox_status", {{"conversation", "fresh"}});
  CHECK(tools.wrong_shape("sandbox_status", status) == "");
  CHECK(status.structured["sandbox"].is_null());
  CHECK(status.structured["state"] == "none");
  for (const char* limit : {"memory", "cpu", "pids", "tmpfs", "workspace"}) CHECK(status.structured["limits"].contains(limit));
  auto destroy = tools.call("sandbox_destroy", {{"conversation", "fresh"}});
  CHECK(tools.wrong_shape("sandbox_destroy", destroy) == "");
  CHECK(destroy.structured == json{{"destroyed", false}, {"sandbox", nullptr}, {"snapshots_kept", 0}});
  CHECK(destroy.text == "There was no sandbox to destroy.");
  CHECK(real.sandboxes->manager().running() == 0);  // neither started one
}
