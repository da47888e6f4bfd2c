// How many CPUs this process may use.
#pragma once

namespace agentbox::os {

// The CPUs this process may run on (its affinity mask, so a container's or
// taskset's restriction counts), at least one.
int usable_cpus();

}  // namespace agentbox::os
