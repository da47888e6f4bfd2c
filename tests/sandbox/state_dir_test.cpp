// Sandboxes start wherever the state directory is (docs/sandbox.md "State
// directory anywhere"): here under a 0700 parent of the server's own user,
// as root's default ~/.local/state/agentbox sits under a 0700 /root. As root
// the sandbox user (uid 65534) cannot walk that parent: each launcher stages
// the sandbox's directories in a mount namespace of its own (staging.h).
#include "fixture.h"

#include "sandbox/staging.h"

#include <dirent.h>
#include <fstream>
#include <future>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

// A 0700 directory of this user (the stand-in for a home) holding the state
// directory at the default's depth; removed with everything under it.
struct PrivateHome {
  PrivateHome() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/agentbox-private-home-XXXXXX";
    home = mkdtemp(tmpl.data());
    chmod(home.c_str(), 0700);
    state_dir = home / ".local" / "state" / "agentbox";
  }
  ~PrivateHome() {
    std::error_code ec;
    fs::remove_all(home, ec);
  }
  fs::path home, state_dir;
};

ManagerOptions options_on(const fs::path& state_dir) {
  ManagerOptions o;
  o.state_dir = state_dir;
  const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
  o.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
  o.agent_args = {};
  return o;
}

json exec(Manager& m, const std::string& conversation, const std::string& command) {
  Lease lease = m.acquire(conversation);
  return lease.agent().call("exec", {{"command", command}, {"timeout_ms", 30'000}}, std::chrono::minutes(1));
}

// Where the fds of process pid point (empty when they cannot be read).
std::vector<std::string> fd_targets(const std::string& pid) {
  std::vector<std::string> targets;
  std::string dir = "/proc/" + pid + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return targets;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::error_code ec;
    auto target = fs::read_symlink(dir + "/" + e->d_name, ec);
    if (!ec) targets.push_back(target.string());
  }
  closedir(d);
  return targets;
}

std::vector<std::string> under(const std::vector<std::string>& targets, const fs::path& dir) {
  std::vector<std::string> hits;
  for (const auto& t : targets)
    if (t.rfind(dir.string(), 0) == 0) hits.push_back(t);
  return hits;
}

}  // namespace

TEST_CASE("a sandbox starts, runs a command and writes its workspace under a 0700 parent of the server's user") {
  PrivateHome h;
  Manager m(options_on(h.state_dir));
  struct stat st{};
  REQUIRE(stat(h.home.c_str(), &st) == 0);
  REQUIRE((st.st_mode & 07777) == 0700);
  REQUIRE(st.st_uid == geteuid());

  json r = exec(m, "private", "echo hi && echo written > /workspace/note.txt && cat /workspace/note.txt");
  INFO(r.dump());
  CHECK(r["exit_code"] == 0);
  CHECK(r["stdout"] == "hi\nwritten\n");
  auto sandbox = m.find("private");
  REQUIRE(sandbox);
  std::ifstream note(sandbox->dirs().workspace() / "note.txt");
  std::string line;
  std::getline(note, line);
  CHECK(line == "written");
  // Home and /tmp are the sandbox's own directories too, and writable.
  CHECK(exec(m, "private", "touch /home/user/h /tmp/t && ls /home/user/h /tmp/t")["exit_code"] == 0);
}

TEST_CASE("snapshot and restore work under a 0700 parent") {
  PrivateHome h;
  Manager m(options_on(h.state_dir));
  REQUIRE(exec(m, "snap", "echo kept > /workspace/a")["exit_code"] == 0);
  m.snapshot("snap", "before");
  REQUIRE(exec(m, "snap", "rm /workspace/a && echo later > /workspace/b")["exit_code"] == 0);
  m.restore("snap", "");
  json r = exec(m, "snap", "cat /workspace/a; ls /workspace");
  INFO(r.dump());
  CHECK(r["stdout"] == "kept\na\n");
}

TEST_CASE("sandboxes started at once each get their own directories; nothing of the staging stays on the host") {
  PrivateHome h;
  ManagerOptions o = options_on(h.state_dir);
  o.spare = ManagerOptions::Spare::Prepared;  // one start goes through the launcher waiting at its gate
  Manager m(o);
  // Several first starts at once, from threads, as the server's workers do.
  std::vector<std::future<json>> starts;
  for (int i = 0; i < 4; ++i) {
    std::string c = "c" + std::to_string(i);
    starts.push_back(std::async(std::launch::async, [&m, c] { return exec(m, c, "echo " + c + " > /workspace/who; ls /workspace"); }));
  }
  for (auto& s : starts) CHECK(s.get()["stdout"] == "who\n");
  for (int i = 0; i < 100 && m.spare_state() != "prepared"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(m.spare_state() == "prepared");
  CHECK(exec(m, "from-spare", "echo from-spare > /workspace/who; ls /workspace")["stdout"] == "who\n");
  for (const std::string c : {"c0", "c1", "c2", "c3", "from-spare"}) {
    auto sandbox = m.find(c);
    REQUIRE(sandbox);
    std::ifstream who(sandbox->dirs().workspace() / "who");
    std::string line;
    std::getline(who, line);
    CHECK(line == c);
  }
  // The staging mounts live in each launcher's own mount namespace only.
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) CHECK(line.find(kStagingDir) == std::string::npos);
  // The server keeps no descriptor into any sandbox's directories, nor does
  // bwrap outside the sandbox (its monitor, the client's pid). Claiming the
  // spare made the manager prepare the next one, which holds descriptors of
  // its new directories while it makes them: wait until it is ready (under
  // load the check otherwise caught those, state_dir_test.cpp flaked).
  for (int i = 0; i < 100 && m.spare_state() != "prepared"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(m.spare_state() == "prepared");
  fs::path sandboxes = h.state_dir / "sandboxes";
  CHECK(under(fd_targets("self"), sandboxes).empty());
  for (const std::string c : {"c0", "c1", "c2", "c3", "from-spare"}) {
    std::string pid = std::to_string(m.find(c)->client()->pid());
    INFO(c << " bwrap pid " << pid);
    CHECK(under(fd_targets(pid), sandboxes).empty());
  }
}
