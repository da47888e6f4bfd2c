// One host uid per sandbox (docs/design.md section 2 and 8, "One host uid per
// sandbox"): as root every sandbox runs as a uid of its own from the agentbox
// range, so per-user kernel limits (inotify instances, mqueue bytes, pending
// signals) are not shared; inside, the user is still uid 1000 `user`. As a
// normal user every sandbox runs as that user, and the test checks that the
// limit is shared, as the docs say.
#include "fixture.h"

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

namespace {

// The real uid on the "Uid:" line of /proc/<pid>/status, or -1.
long host_uid_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

// The agent: bwrap's only child (the agent is pid 1 of the sandbox).
pid_t agent_pid(Manager& m, const std::string& conversation) {
  pid_t bwrap = m.find(conversation)->client()->pid();
  std::ifstream in("/proc/" + std::to_string(bwrap) + "/task/" + std::to_string(bwrap) + "/children");
  pid_t child = 0;
  in >> child;
  return child;
}

int read_int(const std::string& path) {
  std::ifstream in(path);
  int v = -1;
  in >> v;
  return v;
}

// Opens inotify instances until the kernel refuses, keeps them, and says how
// many it got ("held N Too many open files").
constexpr const char* kHoldInotify =
    "python3 -c '\n"
    "import ctypes, os, resource, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n"
    "n = 0\n"
    "while libc.inotify_init1(0) >= 0: n += 1\n"
    "print(\"held\", n, os.strerror(ctypes.get_errno()), \"nofile\", hard, flush=True)\n"
    "time.sleep(600)\n"
    "'";

constexpr const char* kOneInotify =
    "python3 -c '\n"
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(\"ok\" if libc.inotify_init1(0) >= 0 else os.strerror(ctypes.get_errno()))\n"
    "'";

}  // namespace

TEST_CASE("each sandbox runs as a host uid of its own; inside it is still uid 1000 'user'") {
  std::string why;
  if (!sandboxes_supported(why)) {
    WARN("skipped: " << why);
    return;
  }
  SandboxFixture f;
  for (const char* c : {"a", "b"}) {
    auto r = f.exec("id -u; id -g; id -un; echo $HOME; stat -c %u:%U /workspace /home/user", {}, c);
    CHECK(r["stdout"] == "1000\n1000\nuser\n/home/user\n1000:user\n1000:user\n");
  }
  long a = host_uid_of(agent_pid(*f.manager, "a")), b = host_uid_of(agent_pid(*f.manager, "b"));
  long bwrap_a = host_uid_of(f.manager->find("a")->client()->pid());
  INFO("host uids: a " << a << " (bwrap " << bwrap_a << "), b " << b);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  CHECK(bwrap_a == a);
  if (geteuid() != 0) {
    // Documented: a normal user's sandboxes all run as that user.
    CHECK(a == static_cast<long>(getuid()));
    CHECK(b == static_cast<long>(getuid()));
    return;
  }
  CHECK(a != b);
  CHECK(a != 65534);
  CHECK(b != 65534);
  CHECK(a != 0);
  // The host side of its directories belongs to it.
  struct stat st {};
  REQUIRE(stat(f.manager->find("a")->dirs().workspace().c_str(), &st) == 0);
  CHECK(static_cast<long>(st.st_uid) == a);
}

TEST_CASE("a sandbox that holds every inotify instance it can get leaves the other sandbox its own (root); "
          "a normal user's sandboxes share the limit") {
  std::string why;
  if (!sandboxes_supported(why)) {
    WARN("skipped: " << why);
    return;
  }
  int limit = read_int("/proc/sys/fs/inotify/max_user_instances");
  if (limit <= 0 || limit > 60000) {
    WARN("skipped: fs.inotify.max_user_instances is " << limit << ": too many to exhaust from one process");
    return;
  }
  SandboxFixture f;
  auto started = f.call("process.start", {{"command", kHoldInotify}}, "a");
  auto out = f.call("process.output", {{"process_id", started["process_id"]}, {"wait_ms", 20000}, {"pattern", "held"}},
                    "a");
  std::string held = out["stdout"];
  INFO("sandbox a: " << held << "; fs.inotify.max_user_instances " << limit);
  REQUIRE(held.rfind("held ", 0) == 0);
  int count = std::stoi(held.substr(5));
  CHECK(held.find("Too many open files") != std::string::npos);
  CHECK(count <= limit);
  std::string other = f.exec(kOneInotify, {}, "b")["stdout"];
  INFO("sandbox b: " << other);
  if (geteuid() == 0) {
    CHECK(other == "ok\n");
  } else {
    // Documented (README, docs/sandbox.md): one user, one count.
    CHECK(other == "Too many open files\n");
  }
}
