#include "sandbox/run_capture.h"

#include <cerrno>
#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::sandbox {

int run_capture(std::vector<std::string> argv, std::string& err_text,
                std::optional<std::pair<unsigned, unsigned>> drop_to) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return -1;
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    if (drop_to && (setgroups(0, nullptr) != 0 || setgid(drop_to->second) != 0 || setuid(drop_to->first) != 0))
      _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  close(err[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(err[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) err_text.append(buf, static_cast<std::size_t>(n));
  close(err[0]);
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!err_text.empty() && err_text.back() == '\n') err_text.pop_back();
  return pid < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace agentbox::sandbox
