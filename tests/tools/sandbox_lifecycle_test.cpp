// sandbox_status, the snapshot tools and sandbox_destroy over a real
// sandbox (label sandbox): the Manager, bwrap and the archive helper.
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

#include <fstream>

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

namespace {

ToolResult checked(ToolHarness& tools, const std::string& tool, const json& args = json::object()) {
  auto result = tools.call(tool, args);
  INFO(tool << ": " << result.text);
  CHECK(tools.wrong_shape(tool, result) == "");
  return result;
}

// Overwrites bytes inside the snapshot's archive (its digest no longer matches).
void damage(ManagerFixture& real, const std::string& snapshot) {
  bool found = false;
  for (const auto& s : real.sandboxes->snapshots("test")) {
    if (s.id != snapshot) continue;
    std::fstream archive(real.state_dir / s.path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(archive);
    archive.seekp(20);
    archive.write("damaged", 7);
    found = true;
  }
  REQUIRE(found);
}

}  // namespace

TEST_CASE("manager: status, snapshot, list, restore and destroy of a running sandbox", "[tools][lifecycle][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  tools.checked("file_write", {{"path", "keep.txt"}, {"content", "v1"}});
  tools.checked("process_start", {{"command", "sleep 60"}});
  auto status = tools.checked("sandbox_status");
  CHECK(status.structured["state"] == "active");
  CHECK(status.structured["sessions"] == json({"default"}));
  CHECK(status.structured["processes"].size() == 1);
  CHECK(status.structured["workspace_bytes"].get<std::uint64_t>() > 0);
  CHECK(status.structured["last_snapshot"].is_null());
  CHECK(status.structured["limits"]["memory"].contains("enforced"));  // what its cgroup took, or per process

  auto snap = tools.checked("sandbox_snapshot", {{"label", "v1"}});
  std::string id = snap.structured["snapshot"];
  CHECK(snap.structured["label"] == "v1");
  auto list = tools.checked("snapshot_list");
  REQUIRE(list.structured["snapshots"].size() == 1);
  CHECK(list.structured["snapshots"][0]["snapshot"] == id);
  CHECK(list.text.find(id) != std::string::npos);
  CHECK(tools.checked("sandbox_status").structured["last_snapshot"]["snapshot"] == id);

  tools.checked("file_write", {{"path", "keep.txt"}, {"content", "v2"}});
  auto restore = tools.checked("sandbox_restore", {{"snapshot", id}});
  CHECK(restore.structured["snapshot"] == id);
  CHECK(tools.checked("file_read", {{"path", "keep.txt"}}).structured["content"] == "v1");

  auto destroy = tools.checked("sandbox_destroy", {{"keep_snapshots", true}});
  CHECK(destroy.structured["destroyed"] == true);
  CHECK(destroy.structured["snapshots_kept"] == 1);
  CHECK(destroy.structured["sandbox"] == status.structured["sandbox"]);
  CHECK(tools.checked("sandbox_status").structured["state"] == "none");
}

TEST_CASE("manager: a damaged snapshot is refused as SNAPSHOT_CORRUPT and the workspace kept", "[tools][lifecycle][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  tools.checked("file_write", {{"path", "live.txt"}, {"content", "live"}});
  std::string id = tools.checked("sandbox_snapshot").structured["snapshot"];
  REQUIRE(real.sandboxes->snapshots("test").size() == 1);
  damage(real, id);
  auto restore = tools.checked("sandbox_restore", {{"snapshot", id}});
  CHECK(error_code(restore) == "SNAPSHOT_CORRUPT");
  CHECK(restore.text.find(id) != std::string::npos);
  CHECK(tools.checked("file_read", {{"path", "live.txt"}}).structured["content"] == "live");
}

TEST_CASE("manager: a damaged snapshot restored into a stopped sandbox leaves what the next call restores",
          "[tools][lifecycle][manager]") {
  ManagerFixture real({}, 1);  // complete snapshots: the idle one does not build on the damaged one
  ToolHarness tools(real.sandboxes.get());
  tools.checked("file_write", {{"path", "live.txt"}, {"content", "old"}});
  std::string old_id = tools.checked("sandbox_snapshot", {{"label", "old"}}).structured["snapshot"];
  tools.checked("file_write", {{"path", "live.txt"}, {"content", "latest"}});
  REQUIRE(real.sandboxes->manager().teardown("test"));  // stopped: the idle snapshot is the truth
  damage(real, old_id);
  auto restore = tools.checked("sandbox_restore", {{"snapshot", old_id}});
  CHECK(error_code(restore) == "SNAPSHOT_CORRUPT");
  // The failed snapshot did not become the workspace's truth: the next call
  // restores the idle snapshot, as it would have before.
  CHECK(tools.checked("file_read", {{"path", "live.txt"}}).structured["content"] == "latest");
}

TEST_CASE("manager: a damaged snapshot that a later one builds on fails that one's restore too, never an empty workspace",
          "[tools][lifecycle][manager]") {
  // Incremental: the idle snapshot holds only what changed since "old"; no
  // warm copy (which would restore without reading an archive).
  ManagerFixture real({}, persistence::SnapshotStore::kDefaultMaxChain, 0);
  ToolHarness tools(real.sandboxes.get());
  tools.checked("file_write", {{"path", "live.txt"}, {"content", "old"}});
  std::string old_id = tools.checked("sandbox_snapshot", {{"label", "old"}}).structured["snapshot"];
  tools.checked("file_write", {{"path", "other.txt"}, {"content", "latest"}});
  REQUIRE(real.sandboxes->manager().teardown("test"));
  damage(real, old_id);
  auto read = tools.checked("file_read", {{"path", "live.txt"}});
  CHECK(error_code(read) == "SNAPSHOT_CORRUPT");
  CHECK(read.text.find(old_id) != std::string::npos);  // names the link that failed
  // Asked again, the same: the conversation is not handed a fresh workspace.
  CHECK(error_code(tools.checked("file_read", {{"path", "other.txt"}})) == "SNAPSHOT_CORRUPT");
}

// The lease a tool call holds ends before its answer goes out: the caller
// may stop the sandbox as soon as it has the answer (CI once saw this
// teardown refused as "in use" under load, a race between the answer and
// the lease's release on the agent's reader thread).
TEST_CASE("manager: a tool call's sandbox is no longer in use once its answer arrives", "[tools][lifecycle][manager]") {
  ManagerFixture real({}, persistence::SnapshotStore::kDefaultMaxChain, 0);
  ToolHarness tools(real.sandboxes.get());
  for (int round = 0; round < 25; ++round) {
    INFO("round " << round);
    auto r = tools.checked("exec", {{"command", "true"}});
    REQUIRE(r.structured.value("exit_code", -1) == 0);
    tools.checked("file_write", {{"path", "round.txt"}, {"content", std::to_string(round)}});
    REQUIRE(real.sandboxes->manager().teardown("test"));
  }
  CHECK(tools.checked("file_read", {{"path", "round.txt"}}).structured["content"] == "24");
}
