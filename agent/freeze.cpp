#include "agent/freeze.h"

#include "os/errno_text.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <thread>
#include <unistd.h>

namespace agentbox::agent {

namespace {

using Clock = std::chrono::steady_clock;

// The state letter of /proc/<pid>/stat (after the command's closing
// parenthesis, which may itself contain ')' and spaces); 0 when gone.
char process_state(const char* pid) {
  std::string path = std::string("/proc/") + pid + "/stat";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buffer[512];
  ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (n <= 0) return 0;
  std::string_view text(buffer, static_cast<std::size_t>(n));
  auto close_paren = text.rfind(')');
  if (close_paren == std::string_view::npos || close_paren + 2 >= text.size()) return 0;
  return text[close_paren + 2];
}

// Processes of the box other than this one that are not stopped yet.
int still_running() {
  DIR* dir = opendir("/proc");
  if (!dir) return 0;
  int running = 0;
  std::string self = std::to_string(getpid());
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9' || self == entry->d_name) continue;
    char state = process_state(entry->d_name);
    // T stopped, t traced, Z/X gone: none of them runs.
    if (state != 0 && state != 'T' && state != 't' && state != 'Z' && state != 'X') ++running;
  }
  closedir(dir);
  return running;
}

// kill(-1) reaches every process the caller may signal in its pid
// namespace: only pid 1 of the box's own namespace may use it.
void require_pid_1() {
  if (getpid() != 1)
    throw SandboxError(codes::kInternal, "box.freeze needs the agent to be pid 1 of the box's pid namespace (it is pid " +
                                             std::to_string(getpid()) + ")");
}

json freeze(AgentRequest&) {
  require_pid_1();
  auto start = Clock::now();
  if (kill(-1, SIGSTOP) != 0 && errno != ESRCH)
    throw SandboxError(codes::kInternal, os::errno_text("kill(-1, SIGSTOP)", errno));
  // kill() returns before every target has stopped (one running on another
  // CPU stops when it next leaves the kernel): wait until none runs.
  int running = still_running();
  while (running > 0 && Clock::now() - start < std::chrono::seconds(2)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    // A process forked between the signal and now was not signalled.
    kill(-1, SIGSTOP);
    running = still_running();
  }
  if (running > 0) {
    kill(-1, SIGCONT);
    throw SandboxError(codes::kInternal, std::to_string(running) + " processes did not stop within 2 s of SIGSTOP");
  }
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return {{"stopped", true}, {"waited_ms", waited}};
}

json thaw(AgentRequest&) {
  require_pid_1();
  if (kill(-1, SIGCONT) != 0 && errno != ESRCH)
    throw SandboxError(codes::kInternal, os::errno_text("kill(-1, SIGCONT)", errno));
  return {{"continued", true}};
}

}  // namespace

void register_freeze_methods(MethodTable& table) {
  table[contract::methods::kBoxFreeze] = freeze;
  table[contract::methods::kBoxThaw] = thaw;
}

}  // namespace agentbox::agent
