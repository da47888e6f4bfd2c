#include "os/cpus.h"

#include <sched.h>

namespace agentbox::os {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return n > 0 ? n : 1;
}

}  // namespace agentbox::os
