// `agentbox doctor`: checks what this host allows (bubblewrap, user
// namespaces, cgroups, seccomp, the state directory), then starts a real
// sandbox on the state directory `serve` would use and runs a command in it.
// Each check prints ok / warn / FAIL with plain words on what to change.
// Exit status 0 when sandboxes can run.
#pragma once

#include "sandbox/disk.h"
#include "sandbox/limits.h"

#include <string>
#include <vector>

namespace agentbox::sandbox {

struct DoctorCheck {
  std::string name;
  enum class Level { Ok, Warn, Fail } level = Level::Ok;
  std::string detail;
};

struct DoctorOptions {
  std::string bwrap = "/usr/bin/bwrap";
  std::string state_dir;   // the one `serve` uses (the caller resolves the default); empty fails
  bool start_sandbox = true;
  std::vector<std::string> agent_args = {"agent"};  // how this binary runs the agent
  double cpus = default_cpu_quota();  // the CPU quota to report (serve --cpus)
  std::string uid_range;  // serve's --uid-range START:COUNT; empty: its default
  DiskOptions disk;  // the workspace limit to check (serve --workspace-limit)
  std::uint64_t tmpfs_bytes = Limits{}.tmpfs_bytes;  // serve --tmpfs-size
};

std::vector<DoctorCheck> run_doctor(const DoctorOptions& options);

// argv: [--state-dir DIR] [--bwrap PATH] [--cpus N] [--uid-range START:COUNT] [--no-sandbox]
int doctor_main(int argc, char** argv);

}  // namespace agentbox::sandbox
