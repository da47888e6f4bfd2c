// Starting a sandbox's process: pipes for its stdio, fork, the child's setup
// (cgroup join, parent-death signal, a root server's staging namespace, the
// drop to the sandbox user, the fds bwrap expects), exec. Only
// async-signal-safe calls run between fork and exec: the server is
// multithreaded.
//
// A setup step that fails in the child is sent back to the parent over a
// close-on-exec pipe as {step, errno}, as nsjail does: EOF on that pipe means
// the exec succeeded. So launch() either returns a process that is running
// its program or throws LaunchError, "cannot start the sandbox: <step>:
// <strerror>", never a generic failure found later by its exit status.
//
// Caveat: PR_SET_PDEATHSIG fires when the *thread* that forked the child
// ends, not the process: call launch() on a thread that lives as long as the
// child (AgentClient's reader thread does).
#pragma once

#include "contract/errors.h"
#include "sandbox/staging.h"

#include <cstddef>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace agentbox::sandbox {

struct LaunchSpec {
  std::vector<std::string> argv;          // bwrap and its arguments
  std::vector<std::string> env;
  std::vector<std::string> cgroup_procs;  // joined by the child before exec
  std::optional<std::pair<unsigned, unsigned>> drop_to;  // host uid/gid when the server is root
  int agent_fd = -1;  // kept open in bwrap as kAgentFdInBwrap (the agent binary, for --ro-bind-fd)
  // Also kept open in the child, as fd kAgentFdInBwrap + 1 (a launcher
  // prepared ahead waits on it before it execs bwrap; spare_pool.h).
  int gate_fd = -1;
  // A root server's: the child enters it (a private mount namespace with
  // the sandbox's directories) before it drops to drop_to.
  std::optional<Staging> staging;
};

// A running child and the parent's ends of its stdio (all close-on-exec).
struct LaunchedProcess {
  pid_t pid = -1;
  int stdin_fd = -1;
  std::size_t stdin_capacity = 0;  // bytes the pipe to its stdin holds
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// SANDBOX_START_FAILED with the step that failed and its errno.
class LaunchError : public SandboxError {
 public:
  LaunchError(std::string step, int err, const std::string& message)
      : SandboxError(codes::kSandboxStartFailed, message), step_(std::move(step)), err_(err) {}
  const std::string& step() const { return step_; }
  int err() const { return err_; }

 private:
  std::string step_;
  int err_;
};

// Forks and execs spec.argv. Throws LaunchError.
LaunchedProcess launch(const LaunchSpec& spec);

// SIGKILLs a launched process (its pid is still unreaped, so never another's).
void kill_launched(pid_t pid);
// Reaps it (retrying EINTR); its wait status.
int wait_launched(pid_t pid);
// "exit status 1", "killed by Killed".
std::string describe_wait_status(int status);

}  // namespace agentbox::sandbox
