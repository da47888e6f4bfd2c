// sandbox_fork through the real manager (docs/design.md section 9, "Fork"):
// forks start from the source's workspace, home and sessions (now, or a
// named snapshot), their services start again there, the source keeps
// running, and no change on one side shows on another. The forks own their
// archive (a hard link), so destroying the source loses them nothing.
#include "fixture.h"

#include "persistence/catalog.h"

#include <functional>
#include <thread>

#include <csignal>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
  CHECK(made.cloned == f.manager->disks().clone_why().empty());
  if (made.cloned) {
    // A clone of the box's disk: no snapshot was taken, none is the fork's yet.
    CHECK(made.source.id.empty());
    CHECK(f.manager->snapshots(made.forks[0].conversation).empty());
    CHECK(f.manager->snapshots("source").empty());
  } else {
    // Each fork's snapshot is its own: snapshot_list of a fork shows it (reason "fork").
    auto forked = f.manager->snapshots(made.forks[0].conversation);
    REQUIRE(forked.size() == 1);
    CHECK(forked[0].reason == "fork");
    CHECK(forked[0].digest == made.source.digest);
  }
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

namespace {

// Bytes the state filesystem gives the disk pool's file (disk_pool.h).
std::uint64_t pool_blocks(const fs::path& state) {
  struct stat st{};
  if (stat((state / "disks.pool").c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

// As root the test suite runs where forks clone (scripts/setup installs
// btrfs-progs for the disk pool); anywhere else it says why not, loudly.
bool expect_clones(SandboxFixture& f) {
  std::string why = f.manager->disks().clone_why();
  if (geteuid() == 0) {
    INFO("forks do not clone here: " << why);
    REQUIRE(why.empty());
    return true;
  }
  WARN("a normal user's forks go through a snapshot: " << why);
  CHECK(!why.empty());
  return false;
}

}  // namespace

TEST_CASE("a fork made now clones the box's disk: same files, sessions and /tmp, blocks shared, isolated both ways") {
  SandboxFixture f(fork_options());
  bool clones = expect_clones(f);
  f.exec("head -c 20000000 /dev/urandom > /workspace/big && mkdir /workspace/d && echo one > /workspace/d/a && "
         "echo scratch > /tmp/t && cd /workspace/d && export V=kept",
         {}, "source");
  std::string sum = out(f, "md5sum /workspace/big | cut -c1-32", "source");
  // Down the stack (the box's ext4, the pool's btrfs, the state filesystem)
  // before the pool's size is read.
  for (int i = 0; i < 3; ++i) sync();
  std::uint64_t before = pool_blocks(f.state_dir);
  auto made = f.manager->fork("source", "", "", 2);
  REQUIRE(made.forks.size() == 2);
  CHECK(made.cloned == clones);
  if (!clones) return;
  CHECK(made.taken.frozen.has_value());
  CHECK(made.taken.freeze == "cgroup freezer");
  // Two copies of 20 MB took next to nothing of the state filesystem.
  for (int i = 0; i < 3; ++i) sync();
  CHECK(pool_blocks(f.state_dir) < before + (8u << 20));
  for (const auto& fork : made.forks) {
    INFO(fork.conversation);
    CHECK(out(f, "md5sum /workspace/big | cut -c1-32", fork.conversation) == sum);
    CHECK(out(f, "pwd; echo $V; cat a /tmp/t", fork.conversation) == "/workspace/d\nkept\none\nscratch\n");
    auto status = f.manager->record(fork.conversation);
    REQUIRE(status);
    CHECK(status->state == persistence::SandboxState::Active);
  }
  f.exec("echo source > /workspace/d/a && rm /workspace/big", {}, "source");
  auto wrote = f.exec("echo fork > /workspace/d/a && echo new > /workspace/d/b", {}, made.forks[0].conversation);
  INFO(wrote.dump());
  CHECK(wrote["exit_code"] == 0);
  CHECK(out(f, "cat /workspace/d/*; ls /workspace", "source") == "source\nd\n");
  CHECK(out(f, "cat /workspace/d/*; md5sum /workspace/big | cut -c1-32", made.forks[0].conversation) ==
        "fork\nnew\n" + sum);
  CHECK(out(f, "cat /workspace/d/*", made.forks[1].conversation) == "one\n");
  // A fork of a fork, and forks that outlive their source.
  auto grandchild = f.manager->fork(made.forks[0].conversation, "", "grandchild", 1);
  CHECK(grandchild.cloned);
  REQUIRE(f.manager->destroy("source"));
  CHECK(out(f, "cat /workspace/d/*", "grandchild") == "fork\nnew\n");
  CHECK(out(f, "cat /workspace/d/a", made.forks[1].conversation) == "one\n");
  // Its idle teardown and restore work as for any sandbox (its first snapshot is complete).
  REQUIRE(f.manager->teardown("grandchild"));
  CHECK(out(f, "cat /workspace/d/*; md5sum /workspace/big | cut -c1-32", "grandchild") == "fork\nnew\n" + sum);
}

// What a server runs with by default: the first call of a conversation
// claims the spare made ready ahead. Its disk's ids must go with the clones
// as for a box started on the call (a fork once saw its files as nobody's and
// could not write them).
TEST_CASE("a fork of a box that started from a spare can write the files it inherited") {
  for (auto kind : {ManagerOptions::Spare::Prepared, ManagerOptions::Spare::Warm}) {
    ManagerOptions o = fork_options();
    o.spare = kind;
    SandboxFixture f(o);
    bool clones = expect_clones(f);
    std::string ready = kind == ManagerOptions::Spare::Warm ? "warm" : "prepared";
    for (int i = 0; i < 200 && f.manager->spare_state() != ready; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    INFO("spare " << ready);
    REQUIRE(f.manager->spare_state() == ready);
    f.exec("mkdir /workspace/d && echo one > /workspace/d/a", {}, "source");
    auto made = f.manager->fork("source", "", "", 1);
    CHECK(made.cloned == clones);
    const std::string& fork = made.forks.at(0).conversation;
    auto wrote = f.exec("echo two > /workspace/d/a && echo new > /workspace/d/b && stat -c %U /workspace/d/a", {}, fork);
    INFO(wrote.dump());
    CHECK(wrote["exit_code"] == 0);
    CHECK(wrote["stdout"] == "user\n");
    CHECK(out(f, "cat /workspace/d/*", fork) == "two\nnew\n");
    CHECK(out(f, "cat /workspace/d/*", "source") == "one\n");
  }
}

namespace {

ManagerOptions dying_fork_options(const fs::path& state, const char* die_at) {
  ManagerOptions o = fork_options();
  o.state_dir = state;
  const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
  o.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
  if (die_at)
    o.fork_reached = [die_at](const char* step) {
      if (std::string_view(step) == die_at) raise(SIGKILL);
    };
  return o;
}

json exec_in(Manager& m, const std::string& conversation, const std::string& command) {
  Lease lease = m.acquire(conversation);
  return lease.agent().call("exec", {{"command", command}, {"timeout_ms", 20'000}}, std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("SIGKILL at each step of a fork by clone leaves the source whole and no fork or a whole one") {
  if (geteuid() != 0) {
    WARN("a normal user's forks do not clone: nothing to kill here");
    return;
  }
  for (const char* step : {"frozen", "cloned", "installed", "recorded"}) {
    INFO("killed at " << step);
    char tmpl[] = "/tmp/agentbox-fork-crash-XXXXXX";
    fs::path state = mkdtemp(tmpl);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 3;
      try {
        Manager m(dying_fork_options(state, step));
        if (!m.disks().clone_why().empty()) _exit(4);
        exec_in(m, "source", "echo kept > /workspace/a && head -c 5000000 /dev/urandom > /workspace/b && "
                             "md5sum /workspace/b > /workspace/b.md5 && cd /workspace && export V=v");
        m.fork("source", "", "kid", 1);
      } catch (...) {
        code = 5;
      }
      _exit(code);  // the step was never reached
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    {
      Manager m(dying_fork_options(state, nullptr));
      // The source is whole and not left frozen (an exec answers).
      CHECK(exec_in(m, "source", "cat /workspace/a && cd /workspace && md5sum -c b.md5")["stdout"] == "kept\n/workspace/b: OK\n");
      bool made = std::string_view(step) == "installed" || std::string_view(step) == "recorded";
      CHECK(m.record("kid").has_value() == made);
      if (made) {
        CHECK(exec_in(m, "kid", "cat /workspace/a && cd /workspace && md5sum -c b.md5")["stdout"] == "kept\n/workspace/b: OK\n");
        if (std::string_view(step) == "recorded") CHECK(exec_in(m, "kid", "pwd; echo $V")["stdout"] == "/workspace\nv\n");
      }
      for (const auto& e : fs::directory_iterator(state / "disks")) CHECK(e.path().extension() != ".clone");
      // And a fork works again.
      auto again = m.fork("source", "", "again", 1);
      CHECK(again.cloned);
      CHECK(exec_in(m, "again", "cat /workspace/a")["stdout"] == "kept\n");
    }
    std::error_code ec;
    fs::remove_all(state, ec);
  }
}
