// The agent's reader thread for long-lived output streams (background
// processes and the leftovers of finished commands): one epoll loop that
// reads every registered fd and hands the bytes to a callback. Callbacks run
// on the loop thread and must be quick (append to a buffer, notify).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace agentbox::agent {

class IoLoop {
 public:
  using OnData = std::function<void(std::string_view)>;
  using OnEnd = std::function<void()>;

  IoLoop();
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // Takes ownership of fd (made non-blocking); on_end runs once at EOF or
  // error, after which the fd is closed.
  void watch(int fd, OnData on_data, OnEnd on_end);
  // Reads and discards until EOF: for output of background jobs (`cmd &`)
  // still holding a finished command's pipe, which must not fill up and block them.
  void drain(int fd);
  // Stops watching fd and closes it (on_end runs), on the loop's thread so a
  // read in progress never meets a closed or reused fd. For fds that never
  // end by themselves (inotify).
  void close_later(int fd);

 private:
  struct Watch {
    OnData on_data;
    OnEnd on_end;
  };
  void run();

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::mutex mutex_;
  std::map<int, std::shared_ptr<Watch>> watches_;
  std::vector<int> closing_;  // guarded by mutex_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace agentbox::agent
