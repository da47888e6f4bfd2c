#include "persistence/sandbox_lock.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence {

SandboxLock& SandboxLock::operator=(SandboxLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool SandboxLock::acquire(const std::filesystem::path& file, std::chrono::milliseconds wait, SandboxLock& out) {
  std::filesystem::create_directories(file.parent_path());
  int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open lock file " + file.string());
  // flock locks belong to the open file description: a second open in this
  // same process conflicts too, which is what two managers in one test need.
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int err = errno;
      close(fd);
      throw std::system_error(err, std::generic_category(), "cannot lock " + file.string());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      close(fd);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  out = SandboxLock();
  out.fd_ = fd;
  return true;
}

void SandboxLock::release() {
  if (fd_ >= 0) close(fd_);  // closing the only descriptor drops the flock
  fd_ = -1;
}

}  // namespace agentbox::persistence
