#include "sandbox/limits.h"

#include "os/cpus.h"

namespace agentbox::sandbox {

double default_cpu_quota() {
  int n = os::usable_cpus();
  return n > 1 ? n - 1 : 1;
}

std::vector<std::string> agent_limit_args(const Limits& limits, bool memory_cgroup) {
  namespace opt = contract::agent_options;
  std::vector<std::string> args = {
      opt::kNproc, std::to_string(limits.max_processes),
      opt::kFsize, std::to_string(limits.file_size_bytes),
      opt::kNofile, std::to_string(limits.open_files),
      opt::kOutputChars, std::to_string(limits.inline_output_chars),
      opt::kHeadBytes, std::to_string(limits.process_head_bytes),
      opt::kTailBytes, std::to_string(limits.process_tail_bytes),
  };
  // Without a memory cgroup, cap each process's data segment instead (not
  // RLIMIT_AS: runtimes such as V8 reserve far more address space than they use).
  if (!memory_cgroup) args.insert(args.end(), {opt::kData, std::to_string(limits.memory_bytes)});
  return args;
}

}  // namespace agentbox::sandbox
