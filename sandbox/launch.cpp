#include "sandbox/launch.h"

#include "os/errno_text.h"
#include "sandbox/bwrap_plan.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace {

// What the child sends back when a step fails; its index names the step.
enum Step : int { kJoinCgroup, kStage, kDropUser, kMoveFds, kExec };
const char* step_name(int step) {
  switch (step) {
    case kJoinCgroup: return "join the sandbox cgroup";
    case kStage: return "stage the sandbox's directories";
    case kDropUser: return "switch to the sandbox user";
    case kMoveFds: return "set up its file descriptors";
    default: return "exec";
  }
}
struct ChildFailure {
  int step;
  int err;
};

// pid to decimal without allocating (we are between fork and exec).
std::size_t format_pid(pid_t pid, char* out) {
  char digits[16];
  std::size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0);
  for (std::size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  return n;
}

[[noreturn]] void child_fail(int report_fd, int step, int err) {
  ChildFailure failure{step, err};
  (void)!write(report_fd, &failure, sizeof failure);
  _exit(127);
}

// The child, from fork to exec. report_fd is the close-on-exec pipe to the
// parent; everything else it needs was prepared before fork.
[[noreturn]] void child_main(const LaunchSpec& spec, char* const* argv, char* const* envp,
                             const std::vector<const char*>& procs, int stdio[3], int report_fd) {
  char pidbuf[16];
  std::size_t len = format_pid(getpid(), pidbuf);
  for (const char* file : procs) {
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pidbuf, len) < 0) child_fail(report_fd, kJoinCgroup, errno);
    close(fd);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Staging writes what it could not do to the child's stderr (the parent
  // adds it to the message).
  if (spec.staging && !spec.staging->enter(stdio[2])) child_fail(report_fd, kStage, errno);
  if (spec.drop_to) {
    gid_t gid = spec.drop_to->second;
    uid_t uid = spec.drop_to->first;
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
      child_fail(report_fd, kDropUser, errno);
  }
  // Every fd that moves is first copied above the ones it moves to, so no
  // dup2 overwrites one still to be moved (the gate may well be fd 3).
  int moving[6] = {stdio[0], stdio[1], stdio[2], spec.agent_fd, spec.gate_fd, report_fd};
  for (int& fd : moving)
    if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, kAgentFdInBwrap + 2)) < 0) child_fail(report_fd, kMoveFds, errno);
  report_fd = moving[5];
  for (int i = 0; i < 3; ++i)
    if (dup2(moving[i], i) < 0) child_fail(report_fd, kMoveFds, errno);
  int first_closed = 3;
  if (moving[3] >= 0) {
    if (dup2(moving[3], kAgentFdInBwrap) < 0) child_fail(report_fd, kMoveFds, errno);  // dup2 clears close-on-exec
    first_closed = kAgentFdInBwrap + 1;
  }
  if (moving[4] >= 0) {
    if (dup2(moving[4], kAgentFdInBwrap + 1) < 0) child_fail(report_fd, kMoveFds, errno);
    first_closed = kAgentFdInBwrap + 2;
  }
  // The report pipe goes just above what the program keeps, still
  // close-on-exec; everything past it is closed.
  if (report_fd != first_closed) {
    if (dup3(report_fd, first_closed, O_CLOEXEC) < 0) child_fail(report_fd, kMoveFds, errno);
    report_fd = first_closed;
  }
  syscall(SYS_close_range, static_cast<unsigned>(first_closed + 1), ~0u, 0u);
  execve(argv[0], argv, envp);
  child_fail(report_fd, kExec, errno);
}

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

// What the child wrote to its stderr before it failed (staging's reason).
std::string stderr_left(int fd) {
  fcntl(fd, F_SETFL, O_NONBLOCK);  // a child forked meanwhile may hold a copy of the write end
  std::string text;
  char buf[1024];
  ssize_t n;
  while (text.size() < 4096 && (n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

LaunchError failure_error(const LaunchSpec& spec, const ChildFailure& failure, const std::string& said) {
  std::string step = step_name(failure.step);
  if (failure.step == kExec) step += " " + spec.argv[0];
  std::string message = "cannot start the sandbox: " + step + ": " + std::strerror(failure.err);
  if (failure.step == kExec && failure.err == ENOENT && spec.argv[0].find("bwrap") != std::string::npos)
    message += " (bubblewrap (bwrap) is not installed; install the 'bubblewrap' package)";
  if (!said.empty()) message += " (" + said + ")";
  return LaunchError(step, failure.err, message);
}

}  // namespace

LaunchedProcess launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) throw LaunchError("exec", EINVAL, "cannot start the sandbox: no program to run");
  std::vector<std::string> args = spec.argv, env = spec.env;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<const char*> procs;
  for (const auto& p : spec.cgroup_procs) procs.push_back(p.c_str());

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(report, O_CLOEXEC)) {
    int e = errno;
    close_all({in[0], in[1], out[0], out[1], err[0], err[1], report[0], report[1]});
    throw LaunchError("pipe", e, os::errno_text("pipe", e));
  }
  // A file page is a megabyte: a pipe that holds it lets the agent write it in
  // one go instead of sixteen 64 KiB hand-offs with the reader (best effort).
  fcntl(out[1], F_SETPIPE_SZ, 1 << 20);
  // The other way too: a request that fits is handed over without waiting for
  // the agent (AgentClient::try_call_async).
  fcntl(in[1], F_SETPIPE_SZ, 1 << 20);
  int capacity = fcntl(in[1], F_GETPIPE_SZ);
  pid_t pid = fork();
  if (pid == 0) {
    int stdio[3] = {in[0], out[1], err[1]};
    child_main(spec, argv.data(), envp.data(), procs, stdio, report[1]);
  }
  int fork_errno = errno;
  close_all({in[0], out[1], err[1], report[1]});
  if (pid < 0) {
    close_all({in[1], out[0], err[0], report[0]});
    throw LaunchError("fork", fork_errno, os::errno_text("fork", fork_errno));
  }
  ChildFailure failure{};
  ssize_t n;
  do {
    n = read(report[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n != 0) {  // EOF: the exec succeeded; anything else is a failed step
    if (n != sizeof failure) failure = {kExec, n < 0 ? errno : EIO};
    kill_launched(pid);
    wait_launched(pid);
    std::string said = stderr_left(err[0]);
    close_all({in[1], out[0], err[0]});
    throw failure_error(spec, failure, said);
  }
  LaunchedProcess process;
  process.pid = pid;
  process.stdin_fd = in[1];
  process.stdin_capacity = capacity > 0 ? static_cast<std::size_t>(capacity) : 0;
  process.stdout_fd = out[0];
  process.stderr_fd = err[0];
  return process;
}

void kill_launched(pid_t pid) {
  if (pid > 0) ::kill(pid, SIGKILL);
}

int wait_launched(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) return "killed by " + std::string(strsignal(WTERMSIG(status)));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace agentbox::sandbox
