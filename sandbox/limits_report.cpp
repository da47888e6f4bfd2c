#include "sandbox/limits_report.h"

#include "sandbox/disk.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace agentbox::sandbox {

namespace {

std::string cpu_enforced(bool cpu_controller, double quota) {
  return !cpu_controller ? "none" : quota > 0 ? "cgroup" : "weight";
}

json limits_json(const Limits& l, bool memory, bool pids, bool cpu, double cpus, json workspace) {
  return {{"memory", {{"bytes", l.memory_bytes}, {"enforced", memory ? "cgroup" : "per-process"}}},
          {"cpu", {{"cpus", cpu ? cpus : 0.0}, {"enforced", cpu_enforced(cpu, cpus)}}},
          {"pids", {{"max", l.max_processes}, {"enforced", pids ? "cgroup" : "per-user"}}},
          {"tmpfs", {{"bytes", l.tmpfs_bytes}, {"enforced", "size"}}},
          {"workspace", std::move(workspace)}};
}

}  // namespace

std::string cpus_text(double cpus) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", cpus);
  return std::string(buf) + (cpus == 1 ? " CPU" : " CPUs");
}

json workspace_limit(const Disks& disks, const std::filesystem::path* dir) {
  bool held = disks.support().enabled && (!dir || disk_usage(*dir));
  if (!held)
    return {{"enforced", "none"},
            {"why", disks.support().enabled ? "plain directories from before the limit" : disks.support().detail}};
  return {{"bytes", disks.options().bytes}, {"inodes", disks.options().inode_count()}, {"enforced", "filesystem"}};
}

json sandbox_limits(const Manager& manager, const Sandbox* sandbox) {
  const Limits& l = manager.options().limits;
  const CgroupSupport& s = manager.cgroups();
  if (!sandbox)
    return limits_json(l, s.writable && s.has_memory, s.writable && s.has_pids, s.writable && s.has_cpu, l.cpus,
                       workspace_limit(manager.disks(), nullptr));
  double quota = sandbox->cpu_quota();
  // A cpu cgroup without a quota still weighs the sandbox against the others.
  bool cpu = quota > 0 || (s.writable && s.has_cpu && sandbox->cgroup_memory());
  return limits_json(l, sandbox->cgroup_memory(), sandbox->cgroup_pids(), cpu, quota,
                     workspace_limit(manager.disks(), &sandbox->dirs().root));
}

bool limits_all_held(const CgroupSupport& s) { return s.writable && s.has_memory && s.has_pids && s.has_cpu; }

std::vector<std::string> limits_lines(const CgroupSupport& s, const Limits& l, const Disks* disks) {
  bool memory = s.writable && s.has_memory, pids = s.writable && s.has_pids, cpu = s.writable && s.has_cpu;
  std::vector<std::string> lines;
  lines.push_back(memory ? "memory: " + size_text(l.memory_bytes) + " per sandbox (memory cgroup)"
                         : "memory: per process only (RLIMIT_DATA " + size_text(l.memory_bytes) +
                               " each; a sandbox's processes together are not capped)");
  lines.push_back(!cpu        ? "CPU: not capped (no cgroup cpu controller; RLIMIT_CPU counts one process's CPU "
                                "seconds, not a share, and is not set)"
                  : l.cpus > 0 ? "CPU: " + cpus_text(l.cpus) + " per sandbox (cgroup quota), weighted fairly"
                               : "CPU: weighted fairly between sandboxes, no quota (--cpus 0)");
  lines.push_back(pids ? "processes: " + std::to_string(l.max_processes) + " per sandbox (pids cgroup)"
                       : "processes: RLIMIT_NPROC " + std::to_string(l.max_processes) +
                             ", counted over every process of the host uid the sandbox runs as, not per sandbox");
  lines.push_back("tmpfs: /dev/shm and /run " + size_text(l.tmpfs_bytes) + " each (--tmpfs-size), " +
                  (memory ? "counted in the sandbox's memory cgroup" : "counted in no memory limit"));
  if (disks)
    lines.push_back(disks->support().enabled
                        ? "workspace: " + size_text(disks->options().bytes) + " and " +
                              std::to_string(disks->options().inode_count()) + " files per sandbox (" +
                              disks->support().detail + ")"
                        : "workspace: not limited (" + disks->support().detail + ")");
  return lines;
}

void log_limits(const CgroupSupport& support, const Limits& limits, const Disks& disks, bool network_host) {
  spdlog::info("sandboxes: {}; network {}", support.detail, network_host ? "host" : "none");
  auto lines = limits_lines(support, limits, &disks);
  std::string text;
  for (const auto& line : lines) text += (text.empty() ? "" : "; ") + line;
  if (limits_all_held(support) && disks.support().enabled) spdlog::info("limits: {}", text);
  else spdlog::warn("limits: not every limit holds on this host: {}", text);
}

DoctorCheck check_cgroups(const Limits& limits) {
  using Level = DoctorCheck::Level;
  CgroupSupport s = detect_cgroups();
  std::string held;
  for (const auto& line : limits_lines(s, limits, nullptr)) held += "\n        " + line;
  if (s.writable)
    return {"cgroups", s.has_cpu || limits.cpus <= 0 ? Level::Ok : Level::Warn,
            s.detail + "; limits per sandbox:" + held};
  return {"cgroups", Level::Warn,
          s.detail + ". Sandboxes still run, limited by rlimits only; a memory bomb of many processes can use the "
                     "host's memory, and CPU is not capped:" + held};
}

}  // namespace agentbox::sandbox
