// Which limits hold and how (docs/design.md section 8, "Limits that hold"):
// for sandbox_status's `limits`, `doctor` and the log at start. Never claims
// more than is enforced: without cgroups memory is per process, CPU is not
// capped and the process count is the host uid's.
#pragma once

#include "sandbox/doctor_check.h"
#include "sandbox/manager.h"

namespace agentbox::sandbox {

// {"memory": {"bytes", "enforced": "cgroup"|"per-process"},
//  "cpu": {"cpus", "enforced": "cgroup"|"weight"|"none"},
//  "pids": {"max", "enforced": "cgroup"|"per-user"},
//  "tmpfs": {"bytes", "enforced": "size"}, "workspace": workspace_limit()}
// for a running sandbox (what its cgroup took), or with null what a new one
// gets on this host.
json sandbox_limits(const Manager& manager, const Sandbox* sandbox);

// The workspace entry: {"bytes", "inodes", "enforced": "filesystem"} when the
// sandbox directory is its own size-capped filesystem (disk.h), else
// {"enforced": "none", "why"}. dir: a sandbox's directory, or null for what a
// new sandbox gets.
json workspace_limit(const Disks& disks, const std::filesystem::path* dir);

// "1 CPU", "1.5 CPUs": a CPU count for messages.
std::string cpus_text(double cpus);

// One line per limit, in plain words: what holds, and what does not and why;
// the workspace's too when disks is given (doctor checks it on its own).
std::vector<std::string> limits_lines(const CgroupSupport& support, const Limits& limits, const Disks* disks);
// doctor's cgroups line: the cgroup support found and limits_lines for these
// limits (no workspace: doctor checks it on its own).
DoctorCheck check_cgroups(const Limits& limits);
// Whether every limit above is held by a cgroup.
bool limits_all_held(const CgroupSupport& support);
// Logs at start, plainly, which limits hold and how: info when all do, a
// warning naming what does not otherwise.
void log_limits(const CgroupSupport& support, const Limits& limits, const Disks& disks, bool network_host);

}  // namespace agentbox::sandbox
