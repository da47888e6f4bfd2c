// Which limits hold and how (docs/design.md section 8, "Limits that hold"):
// for sandbox_status's `limits`, `doctor` and the log at start. Never claims
// more than is enforced: without cgroups memory is per process, CPU is not
// capped and the process count is the host uid's.
#pragma once

#include "sandbox/manager.h"

namespace agentbox::sandbox {

// {"memory": {"bytes", "enforced": "cgroup"|"per-process"},
//  "cpu": {"cpus", "enforced": "cgroup"|"weight"|"none"},
//  "pids": {"max", "enforced": "cgroup"|"per-user"},
//  "tmpfs": {"bytes", "enforced": "size"}, "workspace": workspace_limit()}
// for a running sandbox (what its cgroup took), or with null what a new one
// gets on this host.
json sandbox_limits(const Manager& manager, const Sandbox* sandbox);

// The workspace entry: {"bytes", "enforced": ...}. Not enforced today
// (the "disk" work of issue 12 fills it in).
json workspace_limit(const Limits& limits);

// One line per limit, in plain words: what holds, and what does not and why.
std::vector<std::string> limits_lines(const CgroupSupport& support, const Limits& limits);
// Whether every limit above is held by a cgroup.
bool limits_all_held(const CgroupSupport& support);

}  // namespace agentbox::sandbox
