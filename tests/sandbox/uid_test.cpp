// One host uid per sandbox (docs/design.md section 2 and 8, "One host uid per
// sandbox"): as root every sandbox runs as a uid of its own from the agentbox
// range, so per-user kernel limits (inotify instances, mqueue bytes, pending
// signals) are not shared; inside, the user is still uid 1000 `user`. As a
// normal user every sandbox runs as that user, and the test checks that the
// limit is shared, as the docs say.
#include "fixture.h"

#include "sandbox/uid_range.h"

#include <sqlite3.h>

#include <fstream>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

namespace {

namespace fs = std::filesystem;

// A slice of the default range of its own, so that other test runs on this
// host (each on its own state directory, all allocating from the bottom of
// the default range) do not share these sandboxes' uids.
ManagerOptions own_slice() {
  ManagerOptions o;
  std::uint32_t start = kDefaultUidStart + 64 * (1 + std::random_device{}() % 1000);
  o.uid_range = agentbox::persistence::IdRange{start, start, 64};
  return o;
}

long owner_of(const fs::path& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_uid) : -1;
}

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
  SandboxFixture f(own_slice());
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
  SandboxFixture f(own_slice());
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

TEST_CASE("restored files belong to the sandbox's own host uid, after a restore and after an idle teardown") {
  std::string why;
  if (!sandboxes_supported(why)) {
    WARN("skipped: " << why);
    return;
  }
  SandboxFixture f(own_slice());
  f.exec("echo one > /workspace/f; mkdir -p /workspace/d; echo h > /home/user/h", {}, "a");
  f.exec("true", {}, "b");
  long a = host_uid_of(agent_pid(*f.manager, "a")), b = host_uid_of(agent_pid(*f.manager, "b"));
  long expected = geteuid() == 0 ? a : static_cast<long>(getuid());
  if (geteuid() == 0) {
    auto ids = f.manager->catalog().find_host_ids(f.manager->find("a")->id());
    REQUIRE(ids);
    CHECK(static_cast<long>(ids->uid) == a);
    CHECK(a != b);
  }
  auto snap = f.manager->snapshot("a", "");
  f.exec("echo two > /workspace/f", {}, "a");
  f.manager->restore("a", snap.record.id);
  auto dirs = f.manager->find("a")->dirs();
  CHECK(f.exec("cat /workspace/f", {}, "a")["stdout"] == "one\n");
  for (const auto& p : {dirs.workspace(), dirs.workspace() / "f", dirs.workspace() / "d", dirs.home() / "h"})
    CHECK(owner_of(p) == expected);
  REQUIRE(f.manager->teardown("a"));
  CHECK(f.exec("cat /workspace/f; stat -c %u /workspace/f", {}, "a")["stdout"] == "one\n1000\n");
  CHECK(host_uid_of(agent_pid(*f.manager, "a")) == expected);
  CHECK(owner_of(dirs.workspace() / "f") == expected);
  CHECK(owner_of(dirs.home() / "h") == expected);
}

TEST_CASE("a sandbox from before host ids keeps 65534 while its files exist, and gets its own uid after a teardown") {
  std::string why;
  if (!sandboxes_supported(why)) {
    WARN("skipped: " << why);
    return;
  }
  if (geteuid() != 0) {
    WARN("skipped: only a root server gives sandboxes host uids (a normal user's run as that user)");
    return;
  }
  // Plain directories, as an older agentbox left them (it made no disk
  // images; a directory holding them never gets one: sandbox/disk.h).
  ManagerOptions legacy = own_slice();
  legacy.disk.bytes = 0;
  SandboxFixture f(legacy);
  f.exec("echo old > /workspace/f", {}, "old");
  std::string id = f.manager->find("old")->id();
  ManagerOptions o = f.manager->options();
  f.manager.reset();
  // What the migration leaves for a sandbox an older agentbox ran: 65534,
  // legacy, its files owned by 65534.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((f.state_dir / "catalog.db").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE host_ids SET uid = 65534, gid = 65534, legacy = 1", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(db);
  fs::path root = f.state_dir / "sandboxes" / id;
  for (const auto& p : {root / "workspace", root / "workspace" / "f", root / "home", root / "tmp"})
    REQUIRE(lchown(p.c_str(), 65534, 65534) == 0);

  // No warm copy: its files are gone after the teardown (a warm copy keeps
  // them, and so 65534: ManagerImpl::assign_owner).
  o.warm_cache = 0;
  f.manager = std::make_unique<Manager>(o);
  CHECK(f.exec("cat /workspace/f; echo new > /workspace/g", {}, "old")["stdout"] == "old\n");
  CHECK(host_uid_of(agent_pid(*f.manager, "old")) == 65534);
  REQUIRE(f.manager->teardown("old"));
  CHECK(f.exec("cat /workspace/f /workspace/g", {}, "old")["stdout"] == "old\nnew\n");
  long now = host_uid_of(agent_pid(*f.manager, "old"));
  CHECK(now >= static_cast<long>(o.uid_range->uid_start));
  CHECK(now < static_cast<long>(o.uid_range->uid_start + o.uid_range->count));
  CHECK(owner_of(root / "workspace" / "g") == now);
  auto ids = f.manager->catalog().find_host_ids(id);
  REQUIRE(ids);
  CHECK_FALSE(ids->legacy);
  // Destroy gives the pair back; keep_snapshots keeps it.
  f.manager->destroy("old", /*keep_snapshots=*/true);
  CHECK(f.manager->catalog().find_host_ids(id));
  f.manager->destroy("old");
  CHECK_FALSE(f.manager->catalog().find_host_ids(id));
}

namespace {

struct IdFiles {
  fs::path dir;
  HostIdFiles files;
  IdFiles() {
    char tmpl[] = "/tmp/agentbox-uid-files-XXXXXX";
    dir = mkdtemp(tmpl);
    files = {(dir / "passwd").string(), (dir / "group").string(), (dir / "subuid").string(), (dir / "subgid").string()};
    write(files.passwd, "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/usr/sbin/nologin\n");
    write(files.group, "root:x:0:\nnogroup:x:65534:\n");
    write(files.subuid, "agentbox-test:100000:65536\n");
    write(files.subgid, "agentbox-test:100000:65536\n");
  }
  ~IdFiles() { fs::remove_all(dir); }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
};

}  // namespace

TEST_CASE("the uid range is checked against host users, groups and other users' subordinate ids") {
  IdFiles t;
  agentbox::persistence::IdRange range{kDefaultUidStart, kDefaultUidStart, kDefaultUidCount};
  CHECK(uid_range_problems(range, t.files).empty());
  CHECK(default_uid_range(t.files).range.uid_start == kDefaultUidStart);
  CHECK(default_uid_range(t.files).source == "the default");

  // Another user's subordinate uids inside the range.
  IdFiles::write(t.files.subuid, "agentbox-test:100000:65536\nalice:2000000100:10\n");
  auto problems = uid_range_problems(range, t.files);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("alice") != std::string::npos);
  CHECK(problems[0].find(t.files.subuid) != std::string::npos);
  if (geteuid() == 0) {
    auto check = check_uid_range(range, t.files);
    CHECK(check.level == DoctorCheck::Level::Fail);
    CHECK(check.detail.find("alice's subordinate ids 2000000100-2000000109") != std::string::npos);
    CHECK(check_uid_range(agentbox::persistence::IdRange{3'000'000'000u, 3'000'000'000u, 65536}, t.files).level ==
          DoctorCheck::Level::Ok);
    CHECK(check_uid_range(agentbox::persistence::IdRange{3'000'000'000u, 3'000'000'000u, 100}, t.files).level ==
          DoctorCheck::Level::Warn);
  } else {
    // A normal user's doctor says what the sandboxes share instead.
    auto check = check_uid_range(range, t.files);
    CHECK(check.level == DoctorCheck::Level::Warn);
    for (const char* shared : {"inotify instances", "watches", "RLIMIT_MSGQUEUE", "RLIMIT_SIGPENDING", "RLIMIT_NPROC"})
      CHECK(check.detail.find(shared) != std::string::npos);
  }

  // agentbox's own entries are its range: the default, and no collision.
  IdFiles::write(t.files.subuid, "agentbox-test:100000:65536\nagentbox:300000:70000\n");
  IdFiles::write(t.files.subgid, "agentbox:400000:65536\n");
  auto chosen = default_uid_range(t.files);
  CHECK(chosen.range.uid_start == 300000);
  CHECK(chosen.range.gid_start == 400000);
  CHECK(chosen.range.count == 65536);
  CHECK(chosen.source.find("agentbox entries") != std::string::npos);
  CHECK(uid_range_problems(chosen.range, t.files).empty());

  // Host users and groups inside, and the host's own low ids.
  IdFiles::write(t.files.passwd, "svc:x:300005:300005::/:/bin/false\n");
  IdFiles::write(t.files.group, "svcgrp:x:400007:\n");
  problems = uid_range_problems(chosen.range, t.files);
  REQUIRE(problems.size() == 2);
  CHECK(problems[0].find("host user svc (300005") != std::string::npos);
  CHECK(problems[1].find("host group svcgrp (400007") != std::string::npos);
  CHECK_FALSE(uid_range_problems(agentbox::persistence::IdRange{1000, 1000, 100}, t.files).empty());
}

TEST_CASE("--uid-range takes START:COUNT and refuses nonsense") {
  auto r = parse_uid_range("2000000000:65536");
  CHECK(r.uid_start == 2'000'000'000u);
  CHECK(r.gid_start == 2'000'000'000u);
  CHECK(r.count == 65536);
  for (const char* bad : {"", "5", "a:b", "1:0", "0:10", "4294967290:10", "1:-1", "100000:65536x"})
    CHECK_THROWS_AS(parse_uid_range(bad), std::invalid_argument);
}
