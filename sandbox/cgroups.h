// Per-sandbox cgroups: memory, process count and CPU weight. Works with
// cgroup v2 (one unified hierarchy; the server moves itself into a leaf so it
// may delegate controllers) and with cgroup v1 (one hierarchy per controller,
// as on this project's CI host). When the server may not create cgroups the
// sandbox still starts, limited by the agent's rlimits only; `doctor` says so.
#pragma once

#include "sandbox/limits.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

struct CgroupSupport {
  enum class Version { None, V1, V2 };
  Version version = Version::None;
  bool writable = false;
  std::string detail;  // plain words: what was found, or what to change
  // Directories under which sandbox cgroups are created: one per controller
  // for v1 (memory, pids, cpu), a single one for v2.
  std::vector<std::filesystem::path> parents;
  bool has_memory = false;
  bool has_pids = false;
  bool has_cpu = false;  // cpu controller: weight and quota


  std::string version_name() const;
};

// The whole text of a cgroup (or /proc) control file; empty when unreadable.
std::string read_control_file(const std::filesystem::path& path);

// /proc/self/cgroup parsed: the cgroup v2 path ("0::path") and each v1
// controller's path ("id:memory,...:path").
struct ProcCgroup {
  std::optional<std::string> unified;
  std::map<std::string, std::string> v1;
};
ProcCgroup parse_proc_cgroup(const std::string& text);

// Whether a cgroup v2 directory is delegated to uid (owned by it, with
// cgroup.procs and cgroup.subtree_control its to write: a systemd user
// manager's subtree, user@UID.service/..., or a unit with Delegate=yes), and
// which of memory, pids and cpu its cgroup.controllers offers.
struct Delegation {
  bool delegated = false;
  bool memory = false, pids = false, cpu = false;
  std::string why;  // when not delegated: what is missing
};
Delegation v2_delegation(const std::filesystem::path& dir, unsigned uid);

// Looks at /proc/self/cgroup and /proc/self/mountinfo and tries to create the
// "agentbox" parent groups. Safe to call more than once.
CgroupSupport detect_cgroups();

// One sandbox's cgroup(s). Destroying it kills what is left inside and
// removes the directories.
class Cgroup {
 public:
  // Creates <parent>/<name> in every hierarchy and writes the limits.
  // Returns nullopt (and sets why) when that is not possible.
  static std::unique_ptr<Cgroup> create(const CgroupSupport& support, const std::string& name,
                                        const Limits& limits, std::string& why);
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // The cgroup.procs files a new process must write its pid to (in order)
  // before it execs; see launch.h.
  const std::vector<std::string>& procs_files() const { return procs_files_; }
  bool limits_memory() const { return memory_; }
  bool limits_pids() const { return pids_; }
  // The CPU quota written (in CPUs), 0 when none could be.
  double cpu_quota() const { return cpu_quota_; }
  // SIGKILLs every process in the group until it is empty.
  void kill_all();
  std::optional<std::uint64_t> memory_usage() const;

 private:
  Cgroup() = default;
  std::vector<std::filesystem::path> dirs_;
  std::vector<std::string> procs_files_;
  CgroupSupport::Version version_ = CgroupSupport::Version::None;
  bool memory_ = false;
  bool pids_ = false;
  double cpu_quota_ = 0;
};

// This process's own group in the v1 hierarchy of `controller`
// (<mount>/<path>), or empty where that controller is not mounted.
std::filesystem::path v1_controller_group(const std::string& controller);

// cgroup v1 cpu.cfs_quota_us for `cpus` CPUs over kCpuPeriodUs (-1: none),
// and the v2 cpu.max line ("max 100000" when none).
inline constexpr std::uint64_t kCpuPeriodUs = 100'000;
std::string cpu_quota_us(double cpus);
std::string cpu_max_line(double cpus);

}  // namespace agentbox::sandbox
