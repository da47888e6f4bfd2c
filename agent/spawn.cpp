#include "agent/spawn.h"

#include "os/errno_text.h"
#include "contract/errors.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace agentbox::agent {

namespace {

// Reads "pid (comm) S ppid ..." from /proc/<pid>/stat. comm may contain spaces
// and parentheses, so parse from the last ')'.
bool read_stat(pid_t pid, char& state, pid_t& ppid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  char* close_paren = std::strrchr(buf, ')');
  if (!close_paren) return false;
  return std::sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2;
}

void write_int(int fd, int value) {
  ssize_t n;
  do {
    n = write(fd, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
}

const std::map<int, std::string>& signal_names() {
  static const std::map<int, std::string> names = {
      {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
      {SIGSYS, "SIGSYS"},
  };
  return names;
}

}  // namespace

Spawned spawn_supervised(const SpawnSpec& spec) {
  // Everything the children need is prepared here: after fork only
  // async-signal-safe calls are allowed (another thread may hold malloc's lock).
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* cwd = spec.cwd.c_str();
  const bool terminal = spec.terminal;
  int extra[4];
  const int extras = static_cast<int>(std::min<std::size_t>(spec.extra_fds.size(), 4));
  for (int i = 0; i < extras; ++i) extra[i] = spec.extra_fds[i];

  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));

  pid_t reaper = fork();
  if (reaper < 0) {
    int err = errno;
    close(status_pipe[0]);
    close(status_pipe[1]);
    throw SandboxError(codes::kSpawnFailed,
                       err == EAGAIN ? "cannot start a process: the sandbox reached its process limit"
                                     : os::errno_text("fork", err));
  }
  if (reaper == 0) {
    // No PR_SET_PDEATHSIG here: it fires when the forking *thread* ends, and
    // request threads are short-lived. If the agent dies, bwrap's init exits
    // and the kernel kills the whole pid namespace anyway.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, nullptr);  // the agent ignores SIGCHLD; the reaper waits
    sigaction(SIGPIPE, &dfl, nullptr);

    int devnull = open("/dev/null", O_RDWR);
    int in = spec.stdin_fd >= 0 ? spec.stdin_fd : devnull;
    int out = spec.stdout_fd >= 0 ? spec.stdout_fd : devnull;
    int err = spec.stderr_fd >= 0 ? spec.stderr_fd : devnull;
    pid_t child = fork();
    if (child == 0) {
      // dup2 onto 0..2 clears CLOEXEC; everything else the agent holds is closed.
      int fds[3] = {fcntl(in, F_DUPFD_CLOEXEC, 10), fcntl(out, F_DUPFD_CLOEXEC, 10), fcntl(err, F_DUPFD_CLOEXEC, 10)};
      int more[4];
      for (int i = 0; i < extras; ++i) more[i] = fcntl(extra[i], F_DUPFD_CLOEXEC, 10);
      for (int i = 0; i < 3; ++i) dup2(fds[i], i);
      for (int i = 0; i < extras; ++i) dup2(more[i], 3 + i);
      syscall(SYS_close_range, static_cast<unsigned>(3 + extras), ~0u, 0u);
      if (terminal) {
        setsid();
        ioctl(0, TIOCSCTTY, 0);
      }
      int adj = open("/proc/self/oom_score_adj", O_WRONLY);
      if (adj >= 0) {
        (void)!write(adj, "1000", 4);  // the OOM killer picks sandboxed code first
        close(adj);
      }
      if (chdir(cwd) != 0) {
        static const char msg[] = "agentbox: the working directory does not exist\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(126);
      }
      execve(argv[0], argv.data(), envp.data());
      static const char msg[] = "agentbox: cannot execute the command\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(127);
    }
    // The reaper keeps only its status pipe: holding the agent's pipes would
    // keep the server from seeing the agent's end.
    int status_fd = fcntl(status_pipe[1], F_DUPFD, 3);
    dup2(devnull, 0);
    dup2(devnull, 1);
    if (status_fd != 3) {
      dup2(status_fd, 3);
      status_fd = 3;
    }
    syscall(SYS_close_range, 4u, ~0u, 0u);
    write_int(status_fd, child < 0 ? -errno : child);
    if (child < 0) _exit(1);
    for (;;) {
      int status = 0;
      pid_t done = waitpid(-1, &status, 0);
      if (done < 0) {
        if (errno == EINTR) continue;
        _exit(0);  // ECHILD: the whole tree is gone
      }
      if (done == child) write_int(status_fd, status);
    }
  }
  close(status_pipe[1]);
  Spawned spawned;
  spawned.reaper = reaper;
  spawned.status_fd = status_pipe[0];
  int first = 0;
  ssize_t n;
  do {
    n = read(spawned.status_fd, &first, sizeof first);
  } while (n < 0 && errno == EINTR);
  if (n != sizeof first || first <= 0) {
    close(spawned.status_fd);
    kill(reaper, SIGKILL);
    int err = n == sizeof first ? -first : EIO;
    throw SandboxError(codes::kSpawnFailed,
                       err == EAGAIN ? "cannot start a process: the sandbox reached its process limit"
                                     : os::errno_text("fork", err));
  }
  spawned.pid = first;
  return spawned;
}

std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  DIR* dir = opendir("/proc");
  if (!dir) return {};
  while (dirent* entry = readdir(dir)) {
    pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    char state;
    pid_t ppid;
    if (read_stat(pid, state, ppid) && state != 'Z') children.emplace(ppid, pid);
  }
  closedir(dir);
  std::vector<pid_t> out, frontier = {root};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(p);
    for (auto it = begin; it != end; ++it) {
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

void signal_tree(pid_t reaper, int sig) {
  for (pid_t pid : descendants(reaper)) kill(pid, sig);
}

void kill_tree(pid_t reaper) {
  for (int round = 0; round < 500; ++round) {
    auto pids = descendants(reaper);
    if (pids.empty()) break;
    // A killed process forks no more; children it made meanwhile are in the
    // next round's picture.
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 10 ? 1 : 5));
  }
  kill(reaper, SIGKILL);
}

bool process_alive(pid_t pid) {
  char state;
  pid_t ppid;
  return read_stat(pid, state, ppid) && state != 'Z';
}

int read_wait_status(int status_fd) {
  int status = 0;
  ssize_t n;
  do {
    n = read(status_fd, &status, sizeof status);
  } while (n < 0 && errno == EINTR);
  return n == sizeof status ? status : -1;
}

std::string signal_name(int sig) {
  auto it = signal_names().find(sig);
  return it != signal_names().end() ? it->second : "SIG" + std::to_string(sig);
}

int signal_number(const std::string& raw) {
  std::string name = raw;
  std::transform(name.begin(), name.end(), name.begin(), ::toupper);
  if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
  for (const auto& [number, known] : signal_names()) {
    if (known == name) return number;
  }
  return 0;
}

}  // namespace agentbox::agent
