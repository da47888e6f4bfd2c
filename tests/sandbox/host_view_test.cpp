// What a box sees of the host and what it may fill (docs/design.md sections 2
// and 8): every tmpfs is sized (or read-only), only the listed parts of /etc
// are bound, /proc/self/mountinfo does not name the agent's install path,
// and the limits the sandbox reports are the ones that really hold.
#include "fixture.h"

#include "sandbox/disk.h"
#include "sandbox/doctor.h"
#include "sandbox/host_etc.h"
#include "sandbox/limits_report.h"

#include <fstream>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

namespace fs = std::filesystem;

namespace {

std::string out_of(const json& r) { return r["stdout"].get<std::string>() + r["stderr"].get<std::string>(); }

// A host /etc file a program may read but the box must not see: planted as
// root (a unique name, removed after), else an existing one off the list.
struct HiddenEtcFile {
  std::string path;
  bool planted = false;
  HiddenEtcFile() {
    if (geteuid() == 0) {
      path = "/etc/agentbox-planted-" + std::to_string(std::random_device{}());
      std::ofstream(path) << "planted\n";
      chmod(path.c_str(), 0644);
      planted = true;
      return;
    }
    for (const char* candidate : {"/etc/fstab", "/etc/login.defs", "/etc/adduser.conf", "/etc/issue", "/etc/debconf.conf"}) {
      if (access(candidate, R_OK) == 0 && !host_etc_binds(fs::path(candidate).filename().string())) {
        path = candidate;
        return;
      }
    }
  }
  ~HiddenEtcFile() {
    if (planted) unlink(path.c_str());
  }
};

}  // namespace

TEST_CASE("every tmpfs in the box is sized: writing past /dev/shm and /run fails with ENOSPC") {
  ManagerOptions o;
  SandboxFixture f(o);
  const std::uint64_t size = o.limits.tmpfs_bytes;
  for (const char* dir : {"/dev/shm", "/run"}) {
    std::string file = std::string(dir) + "/fill";
    // One MiB past the size: dd stops at the end with "No space left on device".
    auto r = f.exec("dd if=/dev/zero of=" + file + " bs=1M count=" + std::to_string(size / (1 << 20) + 1) +
                    " 2>&1; echo rc=$?; stat -c %s " + file + "; rm -f " + file);
    std::string out = out_of(r);
    INFO(dir << ": " << out);
    CHECK(out.find("No space left on device") != std::string::npos);
    CHECK(out.find("rc=1") != std::string::npos);
    std::string bytes = out.substr(out.find("rc=1\n") + 5);
    CHECK(std::stoull(bytes) <= size);
  }
  // bwrap's own tmpfs (the root, /dev) cannot be sized: they are read-only.
  auto r = f.exec("for d in / /dev /etc; do touch $d/x 2>/dev/null && echo writable $d; done; "
                  "echo x > /dev/null && echo devnull-ok");
  CHECK(r["stdout"] == "devnull-ok\n");
}

TEST_CASE("only the listed parts of host /etc are in the box, and the common tools still work") {
  HiddenEtcFile hidden;
  REQUIRE(!hidden.path.empty());
  SandboxFixture f;
  auto r = f.exec("cat " + hidden.path + " 2>&1; ls /etc | grep -c agentbox-planted; test -e /etc/shadow && echo shadow; "
                  "test -e /etc/gshadow && echo gshadow; true");
  INFO(hidden.path << ": " << out_of(r));
  CHECK(r["stdout"].get<std::string>().find("No such file or directory") != std::string::npos);
  CHECK(r["stdout"].get<std::string>().find("shadow") == std::string::npos);
  auto tools = f.exec(
      "set -e; getent passwd user | cut -d: -f1,6; bash -c 'echo bash-ok'; "
      "git init -q /tmp/r && cd /tmp/r && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m m && "
      "git log --format=%s; python3 -c 'import ssl; print(ssl.create_default_context().cert_store_stats()[\"x509_ca\"] > 0)'; "
      "ls -L /usr/bin/awk >/dev/null && echo alternatives-ok; date +%Z; test -s /etc/ld.so.cache && echo ldcache-ok",
      {{"timeout_ms", 60000}});
  INFO(out_of(tools));
  CHECK(tools["stdout"] == "user:/home/user\nbash-ok\nm\nTrue\nalternatives-ok\nUTC\nldcache-ok\n");
}

TEST_CASE("/proc/self/mountinfo in the box does not show where the agent is installed") {
  SandboxFixture f;
  f.exec("true");
  fs::path agent = f.manager->options().agent_binary;
  auto r = f.exec("cat /proc/self/mountinfo");
  std::string mountinfo = r["stdout"];
  INFO(mountinfo);
  CHECK(mountinfo.find("agentbox-bin") != std::string::npos);  // the agent is there...
  CHECK(mountinfo.find(agent.string()) == std::string::npos);  // ...but not named by its host path
  CHECK(mountinfo.find(agent.parent_path().string() + "/") == std::string::npos);
  CHECK(f.exec("/run/agentbox-bin/agentbox --version >/dev/null 2>&1; echo $?")["stdout"] != "126\n");
}

// The copy is made by the first server of a build; its writable fd must not
// be what the server holds, or exec of the copy fails with ETXTBSY.
TEST_CASE("a box starts from an agent copy made just now") {
  const char* env = std::getenv("AGENTBOX_TEST_AGENT");
  fs::path source = env && *env ? env : AGENTBOX_TEST_AGENT;
  std::string tmpl = (fs::temp_directory_path() / "agentbox-copy-test-XXXXXX").string();
  fs::path dir = mkdtemp(tmpl.data());
  fs::copy_file(source, dir / "agentbox-agent");  // a new inode: a build no copy exists for yet
  ManagerOptions o;
  o.agent_binary = dir / "agentbox-agent";
  {
    SandboxFixture f(o);
    auto r = f.exec("echo started");
    CHECK(r["stdout"] == "started\n");
  }
  fs::remove_all(dir);
}

TEST_CASE("sandbox limits say which limits hold and how, and what is said is what happens") {
  ManagerOptions o;
  o.limits.memory_bytes = 256ull << 20;
  SandboxFixture f(o);
  f.exec("true");
  auto sandbox = f.manager->find("test");
  REQUIRE(sandbox);
  json limits = sandbox_limits(*f.manager, sandbox.get());
  INFO(limits.dump());
  CHECK(limits["memory"]["bytes"] == 256ull << 20);
  CHECK(limits["tmpfs"]["bytes"] == o.limits.tmpfs_bytes);
  // As root the fixture's sandboxes get their own filesystem (disk.h); as a normal user none.
  if (f.manager->disks().support().enabled) {
    CHECK(limits["workspace"]["enforced"] == "filesystem");
    CHECK(limits["workspace"]["bytes"] == f.manager->disks().options().bytes);
    auto r = f.exec("df -B1 --output=size /workspace | tail -1");
    CHECK(std::stoull(r["stdout"].get<std::string>()) <= f.manager->disks().options().bytes);
  } else {
    CHECK(limits["workspace"]["enforced"] == "none");
    CHECK(limits["workspace"]["why"] == f.manager->disks().support().detail);
  }
  const auto& cg = f.manager->cgroups();
  if (cg.has_memory) {
    CHECK(limits["memory"]["enforced"] == "cgroup");
  } else {
    CHECK(limits["memory"]["enforced"] == "per-process");
    // Per process: two processes of 200 MiB each (over 256 MiB together) both live.
    auto r = f.exec("python3 -c 'import time; b=bytearray(200<<20); time.sleep(2); print(\"a\")' & "
                    "python3 -c 'import time; b=bytearray(200<<20); time.sleep(2); print(\"b\")' & wait",
                    {{"timeout_ms", 30000}});
    std::string out = r["stdout"];
    CHECK(out.find('a') != std::string::npos);
    CHECK(out.find('b') != std::string::npos);
  }
  CHECK(limits["cpu"]["enforced"] == (cg.has_cpu ? "cgroup" : "none"));
  CHECK(limits["pids"]["enforced"] == (cg.has_pids ? "cgroup" : "per-user"));
  // Without a sandbox: what a new one would get.
  json next = sandbox_limits(*f.manager, nullptr);
  CHECK(next["memory"]["enforced"] == limits["memory"]["enforced"]);
}

TEST_CASE("/proc/self/cgroup of this host parses: its v1 controllers and its v2 path") {
  std::ifstream in("/proc/self/cgroup");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ProcCgroup own = parse_proc_cgroup(text);
  INFO(text);
  REQUIRE(own.unified);  // every cgroup host since 4.5 has the "0::" line (hybrid or v2)
  CHECK(own.unified->rfind('/', 0) == 0);
  if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {  // v1 hybrid, like this project's CI
    REQUIRE(own.v1.count("memory"));
    CHECK(own.v1["memory"].rfind('/', 0) == 0);
    CHECK(own.v1.count("pids"));
  }
  ProcCgroup v2 = parse_proc_cgroup("0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope\n");
  CHECK(*v2.unified == "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope");
  CHECK(v2.v1.empty());
  ProcCgroup v1 = parse_proc_cgroup("4:cpu,cpuacct:/a\n9:memory:/b\n1:name=systemd:/c\n0::/d\n");
  CHECK(v1.v1["cpu"] == "/a");
  CHECK(v1.v1["cpuacct"] == "/a");
  CHECK(v1.v1["memory"] == "/b");
  CHECK(*v1.unified == "/d");
}

// The ownership and permission logic of v2_delegation, on a directory made to
// look like a delegated cgroup (real cgroupfs delegation cannot be had on a
// v1 hybrid host like this one; docs/design.md section 8 says so).
TEST_CASE("a cgroup v2 directory counts as delegated only when this uid owns it and may write it") {
  char tmpl[] = "/tmp/agentbox-cgroup-test-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  std::ofstream(dir / "cgroup.controllers") << "cpuset cpu io memory pids\n";
  std::ofstream(dir / "cgroup.procs") << "";
  std::ofstream(dir / "cgroup.subtree_control") << "";
  Delegation d = v2_delegation(dir, geteuid());
  CHECK(d.delegated);
  CHECK(d.memory);
  CHECK(d.pids);
  CHECK(d.cpu);
  Delegation other = v2_delegation(dir, geteuid() + 1);
  CHECK_FALSE(other.delegated);
  CHECK(other.why.find("owned by uid") != std::string::npos);
  std::ofstream(dir / "cgroup.controllers") << "cpuset io\n";
  Delegation none = v2_delegation(dir, geteuid());
  CHECK_FALSE(none.delegated);
  CHECK_FALSE(none.cpu);  // "cpuset" is not "cpu"
  CHECK(none.why.find("cgroup.controllers") != std::string::npos);
  if (geteuid() != 0) {  // root writes whatever the mode
    std::ofstream(dir / "cgroup.controllers") << "memory pids\n";
    chmod((dir / "cgroup.subtree_control").c_str(), 0444);
    CHECK_FALSE(v2_delegation(dir, geteuid()).delegated);
  }
  fs::remove_all(dir);
  // This host's own cgroup, as detection sees it.
  CgroupSupport s = detect_cgroups();
  INFO(s.detail);
  if (geteuid() != 0) {
    ProcCgroup own = parse_proc_cgroup([] {
      std::ifstream in("/proc/self/cgroup");
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }());
    fs::path mine = fs::path("/sys/fs/cgroup") / fs::path(own.unified.value_or("/")).relative_path();
    if (!v2_delegation(mine, geteuid()).delegated) CHECK_FALSE((s.writable && s.version == CgroupSupport::Version::V2));
  }
}

TEST_CASE("doctor says which limits hold and which do not") {
  DoctorOptions o;
  o.start_sandbox = false;
  std::string tmpl = (fs::temp_directory_path() / "agentbox-doctor-test-XXXXXX").string();
  o.state_dir = mkdtemp(tmpl.data());
  std::string text;
  for (const auto& c : run_doctor(o))
    if (c.name == "cgroups") text = c.detail;
  fs::remove_all(o.state_dir);
  INFO(text);
  CgroupSupport s = detect_cgroups();
  CHECK(text.find(s.has_memory && s.writable ? "per sandbox (memory cgroup)" : "memory: per process only") != std::string::npos);
  CHECK(text.find(s.has_cpu && s.writable ? "per sandbox (cgroup quota)" : "CPU: not capped") != std::string::npos);
  CHECK(text.find(s.has_pids && s.writable ? "per sandbox (pids cgroup)" : "counted over every process of the host uid") !=
        std::string::npos);
  CHECK(text.find("tmpfs: /dev/shm and /run 64 MiB each") != std::string::npos);
  CHECK(text.find("workspace:") == std::string::npos);  // its own check, "workspace limit"
  if (geteuid() != 0) CHECK(text.find("memory: per process only") != std::string::npos);  // this host: v1, no delegation
}
