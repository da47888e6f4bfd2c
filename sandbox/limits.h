// Resource limits of one sandbox (docs/design.md section 8 gives the defaults).
// The server applies memory/pids/cpu through cgroups when it may create them;
// the agent applies rlimits inside the sandbox in every case, so a limit
// always holds even on hosts where cgroups are not writable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace agentbox::sandbox {

// The CPUs this process may run on (its affinity mask), at least one.
int usable_cpus();

// All the CPUs this process may run on but one, at least one: the default
// CPU quota of a sandbox.
double default_cpu_quota();

struct Limits {
  std::uint64_t memory_bytes = 2ull << 30;      // 2 GiB
  std::uint64_t max_processes = 512;
  std::uint64_t cpu_shares = 1024;               // equal weight per sandbox
  // Hard CPU cap in CPUs (cgroup v1 cpu.cfs_quota_us over cpu.cfs_period_us,
  // v2 cpu.max); 0 = none. The default leaves one CPU that a runaway sandbox
  // cannot take from the server and the other sandboxes.
  double cpus = default_cpu_quota();
  std::uint64_t file_size_bytes = 1ull << 30;   // RLIMIT_FSIZE
  std::uint64_t open_files = 4096;
  // Each tmpfs in the box (/dev/shm, /run): RAM, counted in the memory
  // cgroup where there is one (docs/design.md section 8).
  std::uint64_t tmpfs_bytes = 64ull << 20;
  std::chrono::milliseconds default_timeout{120'000};
  std::chrono::milliseconds max_timeout{3'600'000};
  std::size_t inline_output_chars = 30'000;
  // Per stream of a background process: the first head bytes are kept, then
  // the last tail bytes (the oldest in between are dropped with a marker).
  std::size_t process_head_bytes = 64 * 1024;
  std::size_t process_tail_bytes = 1024 * 1024;
};

// The agent's command-line form of the rlimit part (--nproc N --fsize N ...),
// so the agent needs no configuration file inside the sandbox.
std::vector<std::string> agent_limit_args(const Limits& limits, bool memory_cgroup);

}  // namespace agentbox::sandbox
