#include "sandbox/limits.h"

#include <sched.h>

namespace agentbox::sandbox {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return n > 0 ? n : 1;
}

double default_cpu_quota() {
  int n = usable_cpus();
  return n > 1 ? n - 1 : 1;
}

std::vector<std::string> agent_limit_args(const Limits& limits, bool memory_cgroup) {
  std::vector<std::string> args = {
      "--nproc", std::to_string(limits.max_processes),
      "--fsize", std::to_string(limits.file_size_bytes),
      "--nofile", std::to_string(limits.open_files),
      "--output-chars", std::to_string(limits.inline_output_chars),
      "--head-bytes", std::to_string(limits.process_head_bytes),
      "--tail-bytes", std::to_string(limits.process_tail_bytes),
  };
  // Without a memory cgroup, cap each process's data segment instead (not
  // RLIMIT_AS: runtimes such as V8 reserve far more address space than they use).
  if (!memory_cgroup) args.insert(args.end(), {"--data", std::to_string(limits.memory_bytes)});
  return args;
}

}  // namespace agentbox::sandbox
