#include "sandbox/spare_pool.h"

#include "persistence/tree_fs.h"

#include <spdlog/spdlog.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

// How long the spare's replacement waits after the last start ended.
constexpr std::chrono::milliseconds kSpareDelay{50};

PreparedSandbox::~PreparedSandbox() {
  if (claimed) return;  // the box goes as it is: its directories are a conversation's
  box.reset();
  std::error_code ec;
  if (driver && !dirs.root.empty()) driver->drop_storage(dirs.root);
  if (!dirs.root.empty()) persistence::remove_tree(dirs.root);
  if (release_owner && !dirs.root.empty() && fs::symlink_status(dirs.root, ec).type() == fs::file_type::not_found)
    release_owner();
  // lock is released last (member destructor): recovery by another server
  // removes directories only of sandboxes whose lock it can take.
}

bool PreparedSandbox::alive() const { return box && box->agent() && box->agent()->alive(); }

SparePool::SparePool(Kind kind, Build build, RoomForWarm room)
    : kind_(kind), build_(std::move(build)), room_(std::move(room)) {
  if (kind_ == Kind::None) return;
  wanted_ = true;
  thread_ = std::thread([this] { main(); });
}

SparePool::~SparePool() { stop(); }

SparePool::StartGuard::StartGuard(SparePool& pool) : pool_(pool) {
  std::lock_guard lock(pool_.mutex_);
  ++pool_.starting_;
}

SparePool::StartGuard::~StartGuard() {
  std::lock_guard lock(pool_.mutex_);
  if (--pool_.starting_ == 0 && pool_.kind_ != Kind::None && !pool_.spare_) {
    pool_.wanted_ = true;
    pool_.wake_.notify_all();
  }
}

std::unique_ptr<PreparedSandbox> SparePool::take() {
  std::lock_guard lock(mutex_);
  if (!spare_) return nullptr;
  auto p = std::move(spare_);
  if (!p->alive()) {
    auto client = p->box ? p->box->agent() : nullptr;
    spdlog::warn("sandbox {}: the spare had ended ({}); starting from scratch", p->id,
                 client ? client->death_reason() : "no launcher");
    wanted_ = starting_ == 0;
    wake_.notify_all();
    return nullptr;  // destroyed here: its cgroup and directories go
  }
  return p;
}

std::unique_ptr<PreparedSandbox> SparePool::take_warm() {
  std::lock_guard lock(mutex_);
  return spare_ && spare_->warm ? std::move(spare_) : nullptr;
}

std::string SparePool::state() {
  std::lock_guard lock(mutex_);
  return !spare_ ? "none" : spare_->warm ? "warm" : "prepared";
}

void SparePool::main() {
  int failures = 0;
  for (;;) {
    bool warm;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || (wanted_ && !spare_ && starting_ == 0); });
      if (stopping_) return;
      // Not while the sandbox that just started runs its first command: the
      // build (a fork, an exec, a cgroup join) would compete with it.
      if (wake_.wait_for(lock, kSpareDelay, [this] { return stopping_ || starting_ > 0; })) {
        if (stopping_) return;
        continue;  // another start began; wait for it to end
      }
      wanted_ = false;
      warm = kind_ == Kind::Warm;
    }
    // A warm spare counts toward max_sandboxes: only when there is room.
    if (warm && !room_()) warm = false;
    std::unique_ptr<PreparedSandbox> p;
    try {
      p = build_(warm);
      failures = 0;
    } catch (const std::exception& e) {
      spdlog::warn("could not prepare a sandbox ahead: {}", e.what());
      // Back off (a host that cannot start sandboxes says so on each call).
      std::unique_lock lock(mutex_);
      auto wait = std::chrono::seconds(std::min(60, 1 << std::min(++failures, 6)));
      if (wake_.wait_for(lock, wait, [this] { return stopping_; })) return;
      wanted_ = true;
      continue;
    }
    std::unique_lock lock(mutex_);
    if (stopping_) {
      lock.unlock();
      return;  // p is destroyed: nothing of it is left
    }
    spare_ = std::move(p);
  }
}

void SparePool::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  std::unique_ptr<PreparedSandbox> spare;
  {
    std::lock_guard lock(mutex_);
    spare = std::move(spare_);
  }
}

}  // namespace agentbox::sandbox
