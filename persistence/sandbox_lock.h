// One server drives a sandbox at a time (docs/design.md section 8): an exclusive
// flock on <state>/locks/<sandbox>.lock, held while this server has the
// sandbox running. The kernel drops it when the holder dies, even by
// SIGKILL, so a crashed server never leaves a sandbox locked; the catalog's
// owner_pid column only says who holds it, for people reading `sandbox list`.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace agentbox::persistence {

class SandboxLock {
 public:
  SandboxLock() = default;
  ~SandboxLock() { release(); }
  SandboxLock(SandboxLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  SandboxLock& operator=(SandboxLock&& other) noexcept;

  // Waits up to `wait` for the lock; false when another process still holds
  // it. Throws std::system_error when the lock file cannot be opened.
  static bool acquire(const std::filesystem::path& file, std::chrono::milliseconds wait, SandboxLock& out);
  bool held() const { return fd_ >= 0; }
  void release();

 private:
  int fd_ = -1;
};

}  // namespace agentbox::persistence
