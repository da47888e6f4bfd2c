#include "sandbox/cgroups.h"

#include "os/errno_text.h"
#include "contract/errors.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

bool write_file(const fs::path& path, const std::string& value, std::string* why = nullptr) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) {
    if (why) *why = os::errno_text("write " + path.string(), errno);
    return false;
  }
  return true;
}

// This process's cgroup path in the v1 hierarchy of controller, or (empty
// controller) in the v2 one.
std::string own_path(const std::string& controller) {
  ProcCgroup own = parse_proc_cgroup(read_control_file("/proc/self/cgroup"));
  if (controller.empty()) return own.unified.value_or("");
  auto it = own.v1.find(controller);
  return it == own.v1.end() ? std::string() : it->second;
}

// Mount point of a v1 controller (or of cgroup2 when controller is empty).
fs::path mount_of(const std::string& controller) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::stringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string f, mountpoint, fstype, source, options;
    for (int i = 0; i < 5 && pre >> f; ++i) {
      if (i == 4) mountpoint = f;
    }
    post >> fstype >> source >> options;
    if (controller.empty() && fstype == "cgroup2") return mountpoint;
    if (!controller.empty() && fstype == "cgroup") {
      std::stringstream ss(options);
      std::string opt;
      while (std::getline(ss, opt, ',')) {
        if (opt == controller) return mountpoint;
      }
    }
  }
  return {};
}

bool make_dir(const fs::path& dir, std::string& why) {
  if (mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  why = os::errno_text("mkdir " + dir.string(), errno);
  return false;
}

// The parent may exist (made by another server, perhaps as root) and still
// refuse us: only creating a child proves we may make sandbox groups there.
bool can_create_in(const fs::path& parent, std::string& why) {
  fs::path probe = parent / ("probe-" + std::to_string(getpid()));
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    why = os::errno_text("mkdir " + probe.string(), errno);
    return false;
  }
  rmdir(probe.c_str());
  return true;
}

CgroupSupport detect_v2(const fs::path& mount) {
  CgroupSupport s;
  s.version = CgroupSupport::Version::V2;
  fs::path own = mount / fs::path(own_path("")).relative_path();
  // A normal user may only use a subtree delegated to it; its own group's
  // controllers, not the root's, are what it can hand on.
  Delegation d = v2_delegation(own, geteuid());
  if (geteuid() != 0 && !d.delegated) {
    s.detail = "cgroup v2 at " + mount.string() + ", but this server's cgroup " + own.string() +
               " is not delegated to it (" + d.why + "); start it inside a delegated one, e.g. "
               "`systemd-run --user --scope -p Delegate=yes agentbox serve`";
    return s;
  }
  std::string controllers = read_control_file((geteuid() == 0 ? mount : own) / "cgroup.controllers");
  s.has_memory = controllers.find("memory") != std::string::npos;
  s.has_pids = controllers.find("pids") != std::string::npos;
  // A v2 group that has processes may not hand controllers to children (the
  // "no internal processes" rule), so the server first moves itself into a leaf.
  std::string why;
  fs::path leaf = own / "agentbox-server";
  fs::path parent = own / "agentbox";
  std::string enable;
  if (s.has_memory) enable += "+memory ";
  if (s.has_pids) enable += "+pids ";
  s.has_cpu = controllers.find("cpu") != std::string::npos;
  if (s.has_cpu) enable += "+cpu ";
  bool ok = true;
  if (!write_file(own / "cgroup.subtree_control", enable)) {
    ok = make_dir(leaf, why) && write_file(leaf / "cgroup.procs", std::to_string(getpid()), &why) &&
         write_file(own / "cgroup.subtree_control", enable, &why);
  }
  ok = ok && make_dir(parent, why) && write_file(parent / "cgroup.subtree_control", enable, &why) &&
       can_create_in(parent, why);
  s.writable = ok && (s.has_memory || s.has_pids);
  if (s.writable) {
    s.parents = {parent};
    s.detail = "cgroup v2 at " + mount.string() + ", sandboxes under " + parent.string();
  } else {
    s.detail = "cgroup v2 at " + mount.string() + " is not writable by this server (" +
               (why.empty() ? "memory/pids controllers not delegated" : why) +
               "); run as root or in a systemd scope with Delegate=yes";
  }
  return s;
}

CgroupSupport detect_v1() {
  CgroupSupport s;
  s.version = CgroupSupport::Version::V1;
  std::string why;
  for (const std::string controller : {"memory", "pids", "cpu"}) {
    fs::path mount = mount_of(controller);
    if (mount.empty()) continue;
    fs::path parent = mount / fs::path(own_path(controller)).relative_path() / "agentbox";
    if (!make_dir(parent, why) || !can_create_in(parent, why)) continue;
    s.parents.push_back(parent);
    if (controller == "memory") s.has_memory = true;
    if (controller == "pids") s.has_pids = true;
    if (controller == "cpu") s.has_cpu = true;
  }
  s.writable = s.has_memory || s.has_pids;
  s.detail = s.writable ? "cgroup v1 (memory " + std::string(s.has_memory ? "yes" : "no") + ", pids " +
                              (s.has_pids ? "yes" : "no") + ", cpu " + (s.has_cpu ? "yes" : "no") + ")"
                        : "cgroup v1 is not writable by this server (" + why +
                              "); run the server as root to get memory and process limits per sandbox (cgroup v1 "
                              "cannot be delegated to a normal user; a cgroup v2 host can, via systemd's user manager)";
  return s;
}

bool has_word(const std::string& list, const std::string& word) {
  std::stringstream ss(list);
  for (std::string item; ss >> item;)
    if (item == word) return true;
  return false;
}

}  // namespace

std::string read_control_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProcCgroup parse_proc_cgroup(const std::string& text) {
  ProcCgroup out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string list = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && list.empty()) {
      out.unified = path;
      continue;
    }
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) out.v1[item] = path;
  }
  return out;
}

Delegation v2_delegation(const fs::path& dir, unsigned uid) {
  Delegation d;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    d.why = os::errno_text("stat " + dir.string(), errno);
    return d;
  }
  std::string controllers = read_control_file(dir / "cgroup.controllers");
  d.memory = has_word(controllers, "memory");
  d.pids = has_word(controllers, "pids");
  d.cpu = has_word(controllers, "cpu");
  if (st.st_uid != uid) {
    d.why = "owned by uid " + std::to_string(st.st_uid);
    return d;
  }
  for (const char* file : {"cgroup.procs", "cgroup.subtree_control"}) {
    if (access((dir / file).c_str(), W_OK) != 0) {
      d.why = os::errno_text(std::string(file) + " is not writable", errno);
      return d;
    }
  }
  if (!d.memory && !d.pids) {
    d.why = "neither memory nor pids is in its cgroup.controllers";
    return d;
  }
  d.delegated = true;
  return d;
}

fs::path v1_controller_group(const std::string& controller) {
  fs::path mount = mount_of(controller);
  return mount.empty() ? mount : mount / fs::path(own_path(controller)).relative_path();
}

std::string cpu_quota_us(double cpus) {
  if (cpus <= 0) return "-1";
  // The kernel refuses quotas under 1 ms.
  return std::to_string(std::max<std::uint64_t>(1000, static_cast<std::uint64_t>(cpus * kCpuPeriodUs + 0.5)));
}

std::string cpu_max_line(double cpus) {
  return (cpus <= 0 ? std::string("max") : cpu_quota_us(cpus)) + " " + std::to_string(kCpuPeriodUs);
}

std::string CgroupSupport::version_name() const {
  switch (version) {
    case Version::V1: return "v1";
    case Version::V2: return "v2";
    default: return "none";
  }
}

CgroupSupport detect_cgroups() {
  fs::path v2 = mount_of("");
  // Prefer v2 when it carries the controllers; a hybrid host (v1 controllers
  // plus an empty unified mount, like this project's CI) uses v1.
  if (!v2.empty()) {
    std::string controllers = read_control_file(v2 / "cgroup.controllers");
    if (controllers.find("memory") != std::string::npos || controllers.find("pids") != std::string::npos)
      return detect_v2(v2);
  }
  if (!mount_of("memory").empty() || !mount_of("pids").empty()) return detect_v1();
  CgroupSupport none;
  none.detail = "no cgroup filesystem is mounted; limits fall back to rlimits";
  return none;
}

std::unique_ptr<Cgroup> Cgroup::create(const CgroupSupport& support, const std::string& name,
                                       const Limits& limits, std::string& why) {
  if (!support.writable) {
    why = support.detail;
    return nullptr;
  }
  std::unique_ptr<Cgroup> group(new Cgroup);
  group->version_ = support.version;
  for (const auto& parent : support.parents) {
    fs::path dir = parent / name;
    if (!make_dir(dir, why)) return nullptr;
    group->dirs_.push_back(dir);
    group->procs_files_.push_back((dir / "cgroup.procs").string());
    std::string mem = std::to_string(limits.memory_bytes);
    // Headroom over the rlimit so the agent can still answer (and kill) when
    // sandboxed code has used up its process allowance.
    std::string pids = std::to_string(limits.max_processes + 16);
    if (support.version == CgroupSupport::Version::V2) {
      if (support.has_memory) group->memory_ = write_file(dir / "memory.max", mem, &why);
      if (support.has_pids) group->pids_ = write_file(dir / "pids.max", pids, &why);
      write_file(dir / "memory.swap.max", "0");
      if (support.has_cpu) {
        write_file(dir / "cpu.weight", std::to_string(std::max<std::uint64_t>(1, limits.cpu_shares * 100 / 1024)));
        if (write_file(dir / "cpu.max", cpu_max_line(limits.cpus), &why)) group->cpu_quota_ = std::max(0.0, limits.cpus);
      }
    } else if (fs::exists(dir / "memory.limit_in_bytes")) {
      group->memory_ = write_file(dir / "memory.limit_in_bytes", mem, &why);
      if (fs::exists(dir / "memory.memsw.limit_in_bytes")) write_file(dir / "memory.memsw.limit_in_bytes", mem);
    } else if (fs::exists(dir / "pids.max")) {
      group->pids_ = write_file(dir / "pids.max", pids, &why);
    } else if (fs::exists(dir / "cpu.shares")) {
      write_file(dir / "cpu.shares", std::to_string(limits.cpu_shares), &why);
      // Period first: the kernel checks the quota against it.
      if (write_file(dir / "cpu.cfs_period_us", std::to_string(kCpuPeriodUs), &why) &&
          write_file(dir / "cpu.cfs_quota_us", cpu_quota_us(limits.cpus), &why))
        group->cpu_quota_ = std::max(0.0, limits.cpus);
    }
  }
  return group;
}

void Cgroup::kill_all() {
  if (version_ == CgroupSupport::Version::V2) {
    for (const auto& dir : dirs_) write_file(dir / "cgroup.kill", "1");
  }
  // v1 has no cgroup.kill; also the fallback for v2 kernels older than 5.14.
  for (int round = 0; round < 200; ++round) {
    bool any = false;
    for (const auto& file : procs_files_) {
      std::ifstream in(file);
      pid_t pid;
      while (in >> pid) {
        any = true;
        ::kill(pid, SIGKILL);
      }
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  spdlog::warn("cgroup {}: processes still present after repeated SIGKILL", dirs_.empty() ? "" : dirs_[0].string());
}

std::optional<std::uint64_t> Cgroup::memory_usage() const {
  for (const auto& dir : dirs_) {
    for (const char* file : {"memory.current", "memory.usage_in_bytes"}) {
      std::ifstream in(dir / file);
      std::uint64_t value;
      if (in >> value) return value;
    }
  }
  return std::nullopt;
}

Cgroup::~Cgroup() {
  kill_all();
  for (const auto& dir : dirs_) {
    // rmdir fails with EBUSY while the kernel is still tearing processes down.
    for (int attempt = 0; attempt < 50 && rmdir(dir.c_str()) != 0 && errno == EBUSY; ++attempt)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace agentbox::sandbox
