// What both ends of a snapshot operation share: the server reading the
// helper's reports (archive_client.cpp) and the helper reading its extracting
// child's (archive_read.cpp). Each child writes progress lines "P <text>" and
// then one last line.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <poll.h>
#include <string>
#include <unistd.h>

namespace agentbox::persistence {

// Reads lines from fd up to the child's last line, the first that is_final
// accepts, and returns it ("" if the pipe ends first); each "P " line goes to
// on_progress (the text after "P "), other lines are skipped. Up to the last
// line, not to EOF: a process forked meanwhile by another thread may hold
// the pipe's write end open. What on_progress throws propagates: the caller
// kills and reaps the child. With a deadline, ChildTimeout is thrown once it
// passes (the caller kills the child): no thread waits on a child forever.
// With a cancel fd, ChildCancelled is thrown once it is readable (a server
// stopping: Replicator::stop), and the caller kills the child too.
struct ChildTimeout {};
struct ChildCancelled {};

inline std::string read_child_lines(int fd, const std::function<void(const char*)>& on_progress,
                                    const std::function<bool(const std::string&)>& is_final,
                                    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
                                    int cancel_fd = -1) {
  std::string pending;
  char buf[4096];
  for (;;) {
    if (deadline || cancel_fd >= 0) {
      int wait_ms = 60'000;
      if (deadline) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) throw ChildTimeout{};
        wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, wait_ms));
      }
      pollfd p[2] = {{fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
      int rc = ::poll(p, cancel_fd >= 0 ? 2 : 1, wait_ms);
      if (rc < 0 && errno == EINTR) continue;
      if (cancel_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP))) throw ChildCancelled{};
      if (rc == 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.rfind("P ", 0) == 0) {
        if (on_progress) on_progress(line.c_str() + 2);
      } else if (is_final(line)) {
        return line;
      }
    }
  }
}

}  // namespace agentbox::persistence
