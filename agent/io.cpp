#include "agent/io.h"

#include "os/errno_text.h"
#include "contract/errors.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace agentbox::agent {

IoLoop::IoLoop() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw SandboxError(codes::kInternal, os::errno_text("epoll/eventfd", errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { run(); });
}

IoLoop::~IoLoop() {
  stop_ = true;
  std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (const auto& [fd, w] : watches_) close(fd);
  close(epoll_fd_);
  close(wake_fd_);
}

void IoLoop::watch(int fd, OnData on_data, OnEnd on_end) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  auto w = std::make_shared<Watch>(Watch{std::move(on_data), std::move(on_end)});
  {
    std::lock_guard lock(mutex_);
    watches_[fd] = w;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    {
      std::lock_guard lock(mutex_);
      watches_.erase(fd);
    }
    close(fd);
    if (w->on_end) w->on_end();
  }
}

void IoLoop::drain(int fd) {
  watch(fd, [](std::string_view) {}, nullptr);
}

void IoLoop::close_later(int fd) {
  {
    std::lock_guard lock(mutex_);
    closing_.push_back(fd);
  }
  std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void IoLoop::run() {
  epoll_event events[64];
  char buffer[64 * 1024];
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        std::uint64_t value;
        (void)!read(wake_fd_, &value, sizeof value);
        if (stop_) return;
        std::vector<std::pair<int, std::shared_ptr<Watch>>> closing;
        {
          std::lock_guard lock(mutex_);
          for (int c : closing_) {
            auto it = watches_.find(c);
            if (it == watches_.end()) continue;
            closing.emplace_back(c, it->second);
            watches_.erase(it);
          }
          closing_.clear();
        }
        for (auto& [c, w] : closing) {
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c, nullptr);
          close(c);
          if (w->on_end) w->on_end();
        }
        continue;
      }
      std::shared_ptr<Watch> w;
      {
        std::lock_guard lock(mutex_);
        auto it = watches_.find(fd);
        if (it == watches_.end()) continue;
        w = it->second;
      }
      bool ended = false;
      // Bounded reads per event keep one flooding stream from starving the others.
      for (int round = 0; round < 16; ++round) {
        ssize_t got = read(fd, buffer, sizeof buffer);
        if (got > 0) {
          w->on_data(std::string_view(buffer, static_cast<std::size_t>(got)));
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
        ended = true;
        break;
      }
      if (ended) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        {
          std::lock_guard lock(mutex_);
          watches_.erase(fd);
        }
        close(fd);
        if (w->on_end) w->on_end();
      }
    }
  }
}

}  // namespace agentbox::agent
