// sandbox_snapshot, snapshot_list, sandbox_restore (tools/snapshot_tools.cpp):
// results, paging, progress and how the sandbox layer's errors read. "fake
// sandboxes:" tests feed the tool records and errors (fake_sandboxes.h);
// "manager:" tests use the real Manager, for calls that start no sandbox.
#include "fake_sandboxes.h"
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

TEST_CASE("fake sandboxes: sandbox_snapshot reports the record, its label and progress", "[tools][snapshot][fake]") {
  FakeSandboxes fake;
  fake.done = {snapshot_record("snap1", "before refactor"), std::chrono::milliseconds(120),
               std::chrono::milliseconds(35), "cgroup freezer"};
  fake.progress_steps = {10, 60};
  ToolHarness tools(&fake);
  auto context = std::make_shared<TestContext>("c1");
  auto result = tools.call("sandbox_snapshot", {{"label", "before refactor"}}, context);
  CHECK(tools.wrong_shape("sandbox_snapshot", result) == "");
  CHECK(result.structured == json{{"snapshot", "snap1"}, {"bytes", 2'500'000}, {"files", 42}, {"duration_ms", 120},
                                  {"label", "before refactor"}, {"parent", nullptr}, {"created_at", "2026-12-01T10:00:00Z"},
                                  {"digest", "sha256:00"}, {"frozen_ms", 35}, {"freeze", "cgroup freezer"}});
  CHECK(result.text == "Snapshot snap1 'before refactor': 42 entries, 2.5 MB compressed, in 120 ms. Processes "
                       "frozen 35 ms (cgroup freezer): one instant.");
  CHECK(fake.calls == std::vector<std::string>{"snapshot c1 before refactor"});
  auto reports = context->reports();
  REQUIRE(reports.size() == 2);
  CHECK(reports[1].done == 60);
  CHECK(reports[1].total == 100.0);

  fake.done.record.label = "";
  auto unlabelled = tools.call("sandbox_snapshot");
  CHECK(tools.wrong_shape("sandbox_snapshot", unlabelled) == "");
  CHECK(unlabelled.structured["label"].is_null());

  fake.done.frozen.reset();  // a box that could not be frozen: said so, and still in the schema
  fake.done.freeze = "the box is not running";
  auto unfrozen = tools.call("sandbox_snapshot");
  CHECK(tools.wrong_shape("sandbox_snapshot", unfrozen) == "");
  CHECK(unfrozen.structured["frozen_ms"].is_null());
  CHECK(unfrozen.text.find("Processes were not frozen (the box is not running).") != std::string::npos);
}

TEST_CASE("fake sandboxes: a snapshot that cannot be written is an error result with its code", "[tools][snapshot][fake]") {
  FakeSandboxes fake;
  fake.error = SandboxError(codes::kNoSpace, "could not snapshot the workspace: /var is full");
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_snapshot");
  CHECK(tools.wrong_shape("sandbox_snapshot", result) == "");
  CHECK(error_code(result) == "NO_SPACE");
  CHECK(result.text == "NO_SPACE: could not snapshot the workspace: /var is full");
}

TEST_CASE("fake sandboxes: a SNAPSHOT_CORRUPT restore is an error result, no structuredContent", "[tools][restore][fake]") {
  FakeSandboxes fake;
  fake.error = SandboxError(codes::kSnapshotCorrupt,
                                     "snapshot snap1 failed its digest check; nothing was changed");
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_restore", {{"conversation", "c1"}, {"snapshot", "snap1"}});
  CHECK(tools.wrong_shape("sandbox_restore", result) == "");
  CHECK(error_code(result) == "SNAPSHOT_CORRUPT");
  CHECK(result.text == "SNAPSHOT_CORRUPT: snapshot snap1 failed its digest check; nothing was changed");
  CHECK(result.error_object == json{{"code", "SNAPSHOT_CORRUPT"},
                                    {"message", "snapshot snap1 failed its digest check; nothing was changed"}});
  CHECK(fake.calls == std::vector<std::string>{"restore c1 snap1"});
}

TEST_CASE("fake sandboxes: a code outside the vocabulary is shown as INTERNAL", "[tools][restore][fake]") {
  FakeSandboxes fake;
  fake.error = SandboxError("TOTALLY_NEW", "made up in the box");
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_restore");
  CHECK(tools.wrong_shape("sandbox_restore", result) == "");
  CHECK(error_code(result) == "INTERNAL");
  CHECK(result.text == "INTERNAL: made up in the box");
}

TEST_CASE("fake sandboxes: sandbox_restore names what it restored", "[tools][restore][fake]") {
  FakeSandboxes fake;
  fake.done = {snapshot_record("snap2"), std::chrono::milliseconds(35)};
  ToolHarness tools(&fake);
  auto result = tools.call("sandbox_restore");  // the latest
  CHECK(tools.wrong_shape("sandbox_restore", result) == "");
  CHECK(result.structured ==
        json{{"snapshot", "snap2"}, {"created_at", "2026-12-01T10:00:00Z"}, {"files", 42}, {"duration_ms", 35}});
  CHECK(result.text == "Restored snapshot snap2 (taken 2026-12-01T10:00:00Z) in 35 ms; running processes were "
                       "stopped, sessions kept their state.");
  CHECK(fake.calls == std::vector<std::string>{"restore test "});
}

TEST_CASE("fake sandboxes: snapshot_list pages by the inline cap, with a cursor for the rest", "[tools][snapshots][fake]") {
  FakeSandboxes fake;
  for (int i = 0; i < 30; ++i) fake.list.push_back(snapshot_record("snap" + std::to_string(i), i % 2 ? "l" : ""));
  fake.limit_values.inline_output_chars = 2000;
  ToolHarness tools(&fake);
  auto first = tools.call("snapshot_list");
  CHECK(tools.wrong_shape("snapshot_list", first) == "");
  const json& page = first.structured["snapshots"];
  REQUIRE(page.size() > 1);
  REQUIRE(page.size() < 30);
  CHECK(first.structured["truncated"] == true);
  CHECK(first.structured["next_cursor"] == page.back()["snapshot"]);
  CHECK(first.text.size() + first.structured.dump().size() < 2000 + 400);  // within the cap but for the envelope
  CHECK(first.text.find("snapshots shown; next: snapshot_list cursor \"" + page.back()["snapshot"].get<std::string>() +
                        "\"]") != std::string::npos);
  CHECK(page[0]["label"].is_null());
  CHECK(page[0]["reason"] == "idle");
  CHECK(page[1]["label"] == "l");

  std::size_t seen = page.size();
  std::string cursor = first.structured["next_cursor"];
  while (!cursor.empty()) {
    auto next = tools.call("snapshot_list", {{"cursor", cursor}});
    CHECK(tools.wrong_shape("snapshot_list", next) == "");
    CHECK(next.structured["snapshots"][0]["snapshot"] == "snap" + std::to_string(seen));
    seen += next.structured["snapshots"].size();
    cursor = next.structured.value("next_cursor", "");
  }
  CHECK(seen == 30);

  auto gone = tools.call("snapshot_list", {{"cursor", "snap-deleted"}});
  CHECK(tools.wrong_shape("snapshot_list", gone) == "");
  CHECK(error_code(gone) == "INVALID_ARGUMENTS");
  CHECK(gone.text == "INVALID_ARGUMENTS: cursor 'snap-deleted' names no entry of this list (gone since?); list again "
                     "without it");
}

TEST_CASE("manager: snapshot_list and sandbox_restore before any snapshot", "[tools][snapshots][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto list = tools.call("snapshot_list", {{"conversation", "fresh"}});
  CHECK(tools.wrong_shape("snapshot_list", list) == "");
  CHECK(list.structured == json{{"snapshots", json::array()}});
  CHECK(list.text == "No snapshots for this conversation yet.");

  auto latest = tools.call("sandbox_restore", {{"conversation", "fresh"}});
  CHECK(tools.wrong_shape("sandbox_restore", latest) == "");
  CHECK(error_code(latest) == "SNAPSHOT_NOT_FOUND");
  CHECK(latest.text == "SNAPSHOT_NOT_FOUND: this conversation has no snapshot yet; take one with sandbox_snapshot");

  auto named = tools.call("sandbox_restore", {{"conversation", "fresh"}, {"snapshot", "nope"}});
  CHECK(error_code(named) == "SNAPSHOT_NOT_FOUND");
  CHECK(named.text.find("no snapshot 'nope' for this conversation") != std::string::npos);
  CHECK(real.sandboxes->manager().running() == 0);  // a restore of nothing starts nothing
}
