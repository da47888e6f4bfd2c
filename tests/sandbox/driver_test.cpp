// The Driver seam (sandbox/driver.h) with the bubblewrap driver, without a
// manager: a box freezes (a process writing a counter stops advancing) and
// thaws (it goes on), and what the driver owns on the host lists the box's
// directory and cgroup. Where the host has no cgroup freezer for the box (no
// cgroup, as for a normal user here; a v1 host without the freezer
// hierarchy; v2 before Linux 5.2) the agent stops the box's processes with
// SIGSTOP instead (agent/freeze.h); if neither works the test says so loudly.
#include "fixture.h"
#include "sandbox/driver.h"
#include "sandbox/freezer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace agentbox;
using namespace agentbox::sandbox;
namespace fs = std::filesystem;
namespace persistence = agentbox::persistence;

namespace {

std::string read_counter(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  return text;
}

struct DriverFixture {
  DriverFixture() {
    char tmpl[] = "/tmp/agentbox-driver-test-XXXXXX";
    state = mkdtemp(tmpl);
    layout.root = state;
    for (const char* dir : {"snapshots", "locks"}) fs::create_directories(state / dir);
    options.state_dir = state;
    const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
    options.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
    options.agent_args = {};
    driver = make_driver(options, layout, "the test's sandbox user");
    dirs.root = layout.sandbox("driver-test");
    if (geteuid() == 0) dirs.owner = std::make_pair(65534u, 65534u);  // never host root inside
  }
  ~DriverFixture() {
    box.reset();
    driver->drop_storage(dirs.root);
    driver.reset();
    std::error_code ec;
    fs::remove_all(state, ec);
  }
  fs::path state;
  persistence::StateLayout layout;
  ManagerOptions options;
  std::unique_ptr<Driver> driver;
  SandboxDirs dirs;
  std::unique_ptr<Box> box;
};

}  // namespace

TEST_CASE("a frozen box stops where it stands and a thawed one goes on", "[driver]") {
  std::string why;
  if (!test::sandboxes_supported(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  DriverFixture f;
  f.box = f.driver->start("driver-test", f.dirs, /*held=*/false);
  auto agent = f.box->agent();
  agent->await_hello(std::chrono::seconds(10));
  agent->call("process.start",
              {{"command", "i=0; while :; do i=$((i+1)); echo $i > /workspace/counter.tmp; "
                           "mv /workspace/counter.tmp /workspace/counter; sleep 0.01; done"}},
              std::chrono::seconds(10));
  fs::path counter = f.dirs.workspace() / "counter";
  for (int i = 0; i < 500 && read_counter(counter).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(!read_counter(counter).empty());

  FreezeResult frozen = f.box->freeze();
  if (!frozen.done) {
    WARN("NOT TESTED: this machine cannot freeze a box: " << frozen.why);
    CHECK(frozen.why.rfind("not supported here: ", 0) == 0);
    return;
  }
  INFO("frozen by " << frozen.method);
  CHECK((frozen.method == "cgroup freezer" || frozen.method == "SIGSTOP"));
  if (geteuid() == 0) CHECK(frozen.method == "cgroup freezer");  // this machine has the v1 freezer for root
  std::string at_freeze = read_counter(counter);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(read_counter(counter) == at_freeze);

  REQUIRE(f.box->thaw().done);
  std::string after = at_freeze;
  for (int i = 0; i < 300 && after == at_freeze; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = read_counter(counter);
  }
  CHECK(std::stol(after) > std::stol(at_freeze));
  // Frozen again, a box still stops (thawed first: a v1-frozen process
  // ignores SIGKILL) and its cgroup goes.
  REQUIRE(f.box->freeze().done);
  f.box->stop();
  for (const auto& group : f.driver->owned().cgroups) CHECK(group.filename() != "sandbox-driver-test");
}

TEST_CASE("what the driver owns lists a box's directory and cgroup", "[driver]") {
  std::string why;
  if (!test::sandboxes_supported(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  DriverFixture f;
  f.box = f.driver->start("driver-test", f.dirs, /*held=*/true);  // a launcher at its gate is enough
  Owned owned = f.driver->owned();
  CHECK(std::find(owned.sandbox_dirs.begin(), owned.sandbox_dirs.end(), f.dirs.root) != owned.sandbox_dirs.end());
  bool has_group = std::any_of(owned.cgroups.begin(), owned.cgroups.end(),
                               [](const fs::path& g) { return g.filename() == "sandbox-driver-test"; });
  if (f.driver->cgroups().writable) CHECK(has_group);
  else WARN("no cgroups here (" << f.driver->cgroups().detail << "): only the directory is listed");
  if (f.driver->disks().support().enabled) {
    CHECK(std::find(owned.mounts.begin(), owned.mounts.end(), f.dirs.root) != owned.mounts.end());
    CHECK(owned.disk_images.size() == 1);
  }
}

TEST_CASE("a box a crashed server left frozen is thawed at the next start", "[driver][freeze]") {
  fs::path parent = v1_freezer_parent();
  if (geteuid() != 0 || parent.empty()) {
    WARN("NOT TESTED: needs root and the cgroup v1 freezer (a normal user's SIGSTOP freeze ends with its agent)");
    return;
  }
  DriverFixture f;
  // What a kill -9 of the server mid-snapshot leaves: a frozen group of a
  // sandbox no server drives, older than a minute.
  fs::path group = parent / "sandbox-stale-freeze-test";
  fs::create_directories(group);
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sleep", "sleep", "600", static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(child > 0);
  std::ofstream(group / "cgroup.procs") << child << std::flush;
  std::ofstream(group / "freezer.state") << "FROZEN" << std::flush;
  auto state = [&] {
    std::ifstream in(group / "freezer.state");
    std::string s;
    in >> s;
    return s;
  };
  for (int i = 0; i < 200 && state() != "FROZEN"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(state() == "FROZEN");
  timespec old[2] = {{time(nullptr) - 120, 0}, {time(nullptr) - 120, 0}};
  REQUIRE(utimensat(AT_FDCWD, group.c_str(), old, 0) == 0);

  f.driver->remove_stale();
  CHECK(state() == "THAWED");
  if (state() != "THAWED") std::ofstream(group / "freezer.state") << "THAWED" << std::flush;  // fail, not hang
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));  // it could die: thawed
  for (int i = 0; i < 100 && rmdir(group.c_str()) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(fs::exists(group));
}
