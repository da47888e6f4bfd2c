#include "sandbox/frozen_box.h"

#include <spdlog/spdlog.h>

namespace agentbox::sandbox {

using Clock = std::chrono::steady_clock;

FrozenBox::FrozenBox(Box* box) : box_(box) {
  if (!box_) {
    result_ = {false, "the box is not running", ""};
    return;
  }
  result_ = box_->freeze();
  if (!result_.done) return;
  start_ = Clock::now();
  watchdog_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    if (!wake_.wait_for(lock, kMaxFreeze, [this] { return done_; })) {
      thaw_locked();
      thawed_early_ = true;
    }
  });
}

std::optional<std::chrono::milliseconds> FrozenBox::thaw() {
  if (!result_.done) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    thaw_locked();
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  return frozen_for_;
}

std::string FrozenBox::how() const {
  std::string how = result_.done ? result_.method : result_.why;
  if (thawed_early_)
    how += " (thawed after " + std::to_string(kMaxFreeze.count()) + " s while it still ran: it may not be one instant)";
  return how;
}

void FrozenBox::thaw_locked() {
  if (thawed_) return;
  thawed_ = true;
  frozen_for_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  if (auto r = box_->thaw(); !r.done) spdlog::error("a box could not be thawed: {}", r.why);
}

}  // namespace agentbox::sandbox
