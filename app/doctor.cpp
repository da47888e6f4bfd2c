#include "app/doctor.h"

#include "agent/seccomp.h"
#include "contract/errors.h"
#include "persistence/recovery.h"
#include "persistence/store.h"
#include "sandbox/cgroups.h"
#include "sandbox/disk.h"
#include "sandbox/limits_report.h"
#include "sandbox/manager.h"
#include "sandbox/run_capture.h"
#include "sandbox/uid_range.h"

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <grp.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::app {

// The checks are of the sandbox layer's requirements, in its own terms.
using namespace agentbox::sandbox;

namespace fs = std::filesystem;
using Level = DoctorCheck::Level;

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The probes run as the unprivileged uid sandboxes used to run as, when root.
std::optional<std::pair<unsigned, unsigned>> probe_user() {
  if (geteuid() != 0) return std::nullopt;
  return std::make_pair(65534u, 65534u);
}

DoctorCheck check_bwrap(const DoctorOptions& o) {
  if (access(o.bwrap.c_str(), X_OK) != 0)
    return {"bubblewrap", Level::Fail, o.bwrap + " not found: install the 'bubblewrap' package (apt install bubblewrap)"};
  std::string err;
  int rc = run_capture({o.bwrap, "--version"}, err, probe_user());
  return {"bubblewrap", rc == 0 ? Level::Ok : Level::Fail, rc == 0 ? o.bwrap : "bwrap --version failed: " + err};
}

DoctorCheck check_userns(const DoctorOptions& o) {
  std::string clone = read_first_line("/proc/sys/kernel/unprivileged_userns_clone");
  if (clone == "0")
    return {"user namespaces", Level::Fail,
            "disabled: set sysctl kernel.unprivileged_userns_clone=1 (e.g. in /etc/sysctl.d/50-agentbox.conf)"};
  if (read_first_line("/proc/sys/user/max_user_namespaces") == "0")
    return {"user namespaces", Level::Fail, "user.max_user_namespaces is 0: set it to 10000 or more with sysctl"};
  std::string err;
  int rc = run_capture({o.bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc",
                        "/proc", "--dev", "/dev", "/bin/true"},
                       err, probe_user());
  if (rc == 0)
    return {"user namespaces", Level::Ok,
            geteuid() == 0 ? "an unprivileged user (uid 65534, probed) can create them; sandboxes run as uids of "
                             "their own (see sandbox uids)"
                           : "this user can create them"};
  std::string hint;
  if (read_first_line("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1")
    hint = " AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): set sysctl "
           "kernel.apparmor_restrict_unprivileged_userns=0 or add an AppArmor profile allowing userns for bwrap.";
  else if (fs::exists("/.dockerenv") || fs::exists("/run/.containerenv"))
    hint = " This looks like a container: allow user namespaces (e.g. docker run --security-opt seccomp=unconfined "
           "--security-opt apparmor=unconfined) or run agentbox on the host.";
  return {"user namespaces", Level::Fail, "bwrap cannot create a user namespace: " + err + "." + hint};
}

DoctorCheck check_seccomp() {
  std::string why;
  if (agent::seccomp_usable(why)) return {"seccomp", Level::Ok, "filter loads and refuses keyctl"};
  return {"seccomp", Level::Fail, why};
}

// Processes across a teardown (docs/design.md section 9, stretch): not
// built; what CRIU says on this host is what a try would meet first.
DoctorCheck check_criu() {
  const char* name = "processes across teardown (CRIU)";
  std::string ends = "; running processes end at a teardown (process_start restart \"on-restore\" services start again)";
  std::string criu;
  for (const char* path : {"/usr/sbin/criu", "/usr/bin/criu"})
    if (access(path, X_OK) == 0) criu = path;
  if (criu.empty()) return {name, Level::Warn, "not used: criu is not installed" + ends};
  if (geteuid() != 0) return {name, Level::Warn, "not used: criu needs root here" + ends};
  std::string err;
  int rc = run_capture({criu, "check"}, err);
  if (rc == 0) return {name, Level::Warn, "not used: `criu check` passes, but checkpointing boxes is not built" + ends};
  // The first error says why (on kernels from 6.13 on, CRIU before 4.1
  // cannot read the vDSO layout: "vdso: Unexpected rt vDSO area bounds").
  std::string why = "exit " + std::to_string(rc);
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("): ");
    if (line.rfind("Error", 0) == 0 && at != std::string::npos && line.find("exited, status") == std::string::npos) {
      why = line.substr(at + 3);
      break;
    }
  }
  return {name, Level::Warn, "not available: `criu check` fails on this host (" + why.substr(0, 200) + ")" + ends};
}

DoctorCheck check_state_dir(const DoctorOptions& o) {
  if (o.state_dir.empty()) return {"state directory", Level::Fail, "none given (--state-dir DIR)"};
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  if (ec) return {"state directory", Level::Fail, "cannot create " + o.state_dir + ": " + ec.message()};
  fs::path probe = fs::path(o.state_dir) / ".doctor-probe";
  std::ofstream(probe) << "ok";
  bool ok = fs::exists(probe);
  fs::remove(probe, ec);
  return {"state directory", ok ? Level::Ok : Level::Fail,
          ok ? o.state_dir + " is writable" : o.state_dir + " is not writable by this user"};
}

// What recovery kept instead of deleting: damaged catalogs and workspaces
// moved to lost+found (docs/persistence.md, "Crash safety and recovery").
DoctorCheck check_kept_aside(const DoctorOptions& o) {
  auto kept = persistence::kept_aside(persistence::StateLayout{o.state_dir});
  if (kept.empty()) return {"recovery", Level::Ok, "nothing kept aside in " + o.state_dir};
  std::string detail;
  for (const auto& line : kept) detail += (detail.empty() ? "" : "; ") + line;
  return {"recovery", Level::Warn, detail + " (look through them, then delete what you do not need)"};
}

// The workspace limit: a trial image mounted in the state directory, as
// `serve` does at start (sandbox/disk.h), and whether forks made now clone
// the disk images (sandbox/disk_pool.h: the pool is made here as it would be
// by `serve`).
std::vector<DoctorCheck> check_disks(const DoctorOptions& o) {
  try {
    Disks disks(o.state_dir, o.disk, geteuid() == 0);
    std::string clone = disks.clone_why();
    return {{"workspace limit", disks.support().enabled ? Level::Ok : Level::Warn, disks.support().detail},
            {"forks", clone.empty() ? Level::Ok : Level::Warn,
             clone.empty() ? "a fork made now clones the disk image (copy-on-write: its cost does not grow with "
                             "the workspace)"
                           : "a fork made now goes through a snapshot and its first call unpacks it: " + clone}};
  } catch (const std::exception& e) {
    return {{"workspace limit", Level::Fail, e.what()}};
  }
}

// A real sandbox on the state directory `serve` uses (not a temporary one:
// where it sits decides whether sandboxes start, docs/sandbox.md "State
// directory anywhere"), under a conversation of its own, destroyed after.
DoctorCheck check_sandbox(const DoctorOptions& o) {
  DoctorCheck check{"sandbox", Level::Ok, ""};
  std::string conversation = "agentbox-doctor-" + persistence::random_hex(8);
  try {
    ManagerOptions mo;
    mo.state_dir = o.state_dir;
    mo.bwrap = o.bwrap;
    mo.agent_args = o.agent_args;
    mo.limits.cpus = o.cpus;
    mo.limits.tmpfs_bytes = o.tmpfs_bytes;
    if (!o.uid_range.empty()) mo.uid_range = parse_uid_range(o.uid_range);
    mo.disk = o.disk;
    mo.spare = ManagerOptions::Spare::None;
    Manager manager(mo);
    try {
      Lease lease = manager.acquire(conversation);
      double quota = lease.sandbox().cpu_quota();
      json r = lease.agent().call(
          "exec", {{"command", "id -u; grep -qs root: /etc/shadow && echo shadow"}, {"timeout_ms", 10000}},
          std::chrono::seconds(20));
      std::string out = r.value("stdout", "");
      if (out.find("shadow") != std::string::npos)
        check = {"sandbox", Level::Fail, "the host's /etc/shadow is readable inside the sandbox"};
      else
        check.detail = "started a sandbox in " + o.state_dir + " and ran a command in it (uid inside: " +
                       out.substr(0, out.find('\n')) +
                       (quota > 0 ? "; CPU quota " + cpus_text(quota) + " applied" : "; no CPU quota applied") + ")";
    } catch (...) {
      try {
        manager.destroy(conversation);
      } catch (...) {
      }  // the start's own error is the one to report
      throw;
    }
    manager.destroy(conversation);
  } catch (const std::exception& e) {
    check = {"sandbox", Level::Fail, "cannot start a sandbox in " + o.state_dir + ": " + e.what()};
  }
  return check;
}

}  // namespace

std::vector<DoctorCheck> run_doctor(const DoctorOptions& o) {
  std::vector<DoctorCheck> checks = {check_bwrap(o)};
  if (checks[0].level != Level::Fail) checks.push_back(check_userns(o));
  Limits limits;
  limits.cpus = o.cpus;
  limits.tmpfs_bytes = o.tmpfs_bytes;
  checks.push_back(check_cgroups(limits));
  checks.push_back(check_seccomp());
  checks.push_back(check_criu());
  checks.push_back(check_state_dir(o));
  if (checks.back().level != Level::Fail)
    for (auto& check : check_disks(o)) checks.push_back(std::move(check));
  checks.push_back(check_kept_aside(o));
  checks.push_back(check_uid_range(o.uid_range.empty() ? std::nullopt : std::optional(parse_uid_range(o.uid_range))));
  bool blocked = false;
  for (const auto& c : checks) blocked |= c.level == Level::Fail;
  if (o.start_sandbox && !blocked) checks.push_back(check_sandbox(o));
  return checks;
}

int doctor_main(int argc, char** argv) {
  DoctorOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "doctor") continue;
    if (arg == "--state-dir" && i + 1 < argc) o.state_dir = argv[++i];
    else if (arg == "--bwrap" && i + 1 < argc) o.bwrap = argv[++i];
    else if (arg == "--no-sandbox") o.start_sandbox = false;
    else if (arg == "--cpus" && i + 1 < argc) o.cpus = std::atof(argv[++i]);
    else if (arg == "--uid-range" && i + 1 < argc) o.uid_range = argv[++i];
    else if (arg == "--workspace-limit" && i + 1 < argc) o.disk.bytes = parse_size(argv[++i]);
    else if (arg == "--tmpfs-size" && i + 1 < argc) o.tmpfs_bytes = parse_size(argv[++i]);
    else {
      std::cerr << "usage: agentbox doctor [--state-dir DIR] [--bwrap PATH] [--cpus N] [--uid-range START:COUNT] "
                   "[--workspace-limit SIZE] [--tmpfs-size SIZE] [--no-sandbox]\n";
      return 2;
    }
  }
  if (!o.uid_range.empty()) parse_uid_range(o.uid_range);  // a bad one is a usage error (std::invalid_argument)
  bool ok = true;
  for (const auto& c : run_doctor(o)) {
    const char* tag = c.level == Level::Ok ? "ok  " : c.level == Level::Warn ? "warn" : "FAIL";
    std::cout << tag << "  " << c.name << ": " << c.detail << "\n";
    ok &= c.level != Level::Fail;
  }
  std::cout << (ok ? "agentbox can run sandboxes on this host, with the state directory " + o.state_dir + ".\n"
                   : "agentbox cannot run sandboxes until the FAIL lines are fixed.\n");
  return ok ? 0 : 1;
}

}  // namespace agentbox::app
