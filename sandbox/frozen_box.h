// A box frozen for a scope (docs/design.md section 9, "Consistent
// snapshots"): its processes stopped where they stand (Box::freeze: the
// cgroup freezer, or SIGSTOP from the agent) while a snapshot reads its
// workspace or a fork clones its disk, thawed at the end of the scope or
// by a watchdog after kMaxFreeze, whatever the reader does.
#pragma once

#include "sandbox/driver.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace agentbox::sandbox {

// A box is never left frozen longer than this.
inline constexpr std::chrono::seconds kMaxFreeze{60};

class FrozenBox {
 public:
  explicit FrozenBox(Box* box);  // null: not running, nothing frozen
  ~FrozenBox() { thaw(); }
  FrozenBox(const FrozenBox&) = delete;
  FrozenBox& operator=(const FrozenBox&) = delete;

  const FreezeResult& result() const { return result_; }
  // Thaws now (once); how long the box was frozen, none if it was not.
  std::optional<std::chrono::milliseconds> thaw();
  bool thawed_early() const { return thawed_early_; }
  // How it was frozen, or why not, and whether the watchdog cut it short.
  std::string how() const;

 private:
  void thaw_locked();

  Box* box_;
  FreezeResult result_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  bool thawed_ = false;
  bool thawed_early_ = false;
  std::chrono::milliseconds frozen_for_{0};
  std::thread watchdog_;
};

}  // namespace agentbox::sandbox
