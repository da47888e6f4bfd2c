// sandbox_fork through the real manager (docs/design.md section 9, "Fork"):
// forks start from the source's workspace, home and sessions (now, or a
// named snapshot), their services start again there, the source keeps
// running, and no change on one side shows on another. The forks own their
// archive (a hard link), so destroying the source loses them nothing.
#include "fixture.h"

#include "persistence/catalog.h"

#include <functional>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

ManagerOptions fork_options() {
  ManagerOptions o;
  o.disk.bytes = 64ull << 20;
  o.spare = ManagerOptions::Spare::None;
  return o;
}

std::string out(SandboxFixture& f, const std::string& command, const std::string& conversation) {
  return f.exec(command, {}, conversation)["stdout"];
}

std::string code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SandboxError& e) {
    return e.code();
  }
  return "ok";
}

}  // namespace

TEST_CASE("forks start from the source's workspace, home and session; changes on each side stay there") {
  SandboxFixture f(fork_options());
  f.exec("mkdir -p /workspace/src && echo base > /workspace/src/a && echo dot > ~/.note && cd /workspace/src && "
         "export GREETING=hello && greet() { echo hi-$1; }",
         {}, "source");
  f.call("process.start", {{"command", "python3 -m http.server 8765"}, {"restart", "on-restore"}}, "source");
  auto made = f.manager->fork("source", "", "", 2);
  REQUIRE(made.forks.size() == 2);
  CHECK(made.taken.frozen.has_value());  // the source's processes were frozen for the snapshot, then went on
  CHECK(made.forks[0].conversation != made.forks[1].conversation);
  CHECK(made.forks[0].conversation.rfind("source-fork-", 0) == 0);
  for (const auto& fork : made.forks) {
    INFO(fork.conversation);
    CHECK(out(f, "pwd; echo $GREETING; greet x; cat a ~/.note", fork.conversation) ==
          "/workspace/src\nhello\nhi-x\nbase\ndot\n");
    // Its service started again in the fork, on the fork's own port.
    auto listed = f.call("process.list", json::object(), fork.conversation)["processes"];
    REQUIRE(listed.size() == 1);
    CHECK(listed[0]["restart"] == "on-restore");
    CHECK(listed[0]["status"] == "running");
  }
  // The source kept running (its process too) and sees none of the forks' changes.
  f.exec("echo fork-one > /workspace/src/a", {}, made.forks[0].conversation);
  f.exec("echo source-later > /workspace/src/b", {}, "source");
  CHECK(out(f, "cat /workspace/src/a; ls /workspace/src", "source") == "base\na\nb\n");
  CHECK(out(f, "cat /workspace/src/a; ls /workspace/src", made.forks[0].conversation) == "fork-one\na\n");
  CHECK(out(f, "cat /workspace/src/a; ls /workspace/src", made.forks[1].conversation) == "base\na\n");
  CHECK(f.call("process.list", json::object(), "source")["processes"][0]["status"] == "running");
  // Each fork's snapshot is its own: snapshot_list of a fork shows it (reason "fork").
  auto forked = f.manager->snapshots(made.forks[0].conversation);
  REQUIRE(forked.size() == 1);
  CHECK(forked[0].reason == "fork");
  CHECK(forked[0].digest == made.source.digest);
}

TEST_CASE("a fork from a named snapshot holds that snapshot's files, and outlives its source") {
  SandboxFixture f(fork_options());
  f.exec("echo one > /workspace/a", {}, "source");
  auto first = f.manager->snapshot("source", "first");
  f.exec("echo two > /workspace/a", {}, "source");
  auto made = f.manager->fork("source", first.record.id, "named", 1);
  REQUIRE(made.forks.size() == 1);
  CHECK(made.forks[0].conversation == "named");
  CHECK(made.taken.record.id.empty());  // no snapshot taken: the named one is shared
  REQUIRE(f.manager->destroy("source"));  // its archives go; the fork's link stays
  CHECK(out(f, "cat /workspace/a", "named") == "one\n");
}

TEST_CASE("sandbox_fork refuses what it cannot do and changes nothing") {
  SandboxFixture f(fork_options());
  f.exec("echo x > /workspace/a", {}, "source");
  f.exec("true", {}, "taken");
  CHECK(code_of([&] { f.manager->fork("source", "", "taken", 1); }) == "INVALID_ARGUMENTS");
  CHECK(code_of([&] { f.manager->fork("source", "", "source", 1); }) == "INVALID_ARGUMENTS");
  CHECK(code_of([&] { f.manager->fork("source", "", "two", 2); }) == "INVALID_ARGUMENTS");
  CHECK(code_of([&] { f.manager->fork("source", "", "", 0); }) == "INVALID_ARGUMENTS");
  CHECK(code_of([&] { f.manager->fork("source", "", "", 17); }) == "INVALID_ARGUMENTS");
  CHECK(code_of([&] { f.manager->fork("source", "snap-000000000000", "", 1); }) == "SNAPSHOT_NOT_FOUND");
  // Another conversation's snapshot is not this one's to fork.
  auto other = f.manager->snapshot("taken", "");
  CHECK(code_of([&] { f.manager->fork("source", other.record.id, "", 1); }) == "SNAPSHOT_NOT_FOUND");
  CHECK(f.manager->catalog().sandboxes().size() == 2);
  CHECK(out(f, "cat /workspace/a", "source") == "x\n");
}
