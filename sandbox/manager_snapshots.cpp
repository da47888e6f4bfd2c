// The manager's snapshots of running sandboxes (sandbox_snapshot and the
// periodic checkpoints) and sandbox_restore. A snapshot of a running box is
// one instant: its processes are frozen (Box::freeze: the cgroup freezer, or
// SIGSTOP from the agent where the host has none) while the workspace is
// read, and thawed after, at the latest after kMaxFreeze (docs/design.md
// section 9, "Consistent snapshots").
#include "sandbox/frozen_box.h"
#include "sandbox/manager_impl.h"

#include <spdlog/spdlog.h>


namespace agentbox::sandbox {

using Clock = std::chrono::steady_clock;
using persistence::SandboxState;


SnapshotInfo ManagerImpl::take_frozen(ManagedSandbox& sandbox, const std::string& label, const std::string& reason,
                                      const ProgressFn& progress) {
  save_sessions(sandbox, std::chrono::seconds(2));  // the shells answer before they are frozen
  auto start = Clock::now();
  SnapshotInfo info;
  Box* box;
  {
    std::lock_guard lock(sandbox.mutex_);
    box = sandbox.box_.get();  // stays while lifecycle_ is held (only stop() resets it, under lifecycle_)
  }
  {
    FrozenBox frozen(box);
    try {
      info.record = driver_->export_workspace(*store_, sandbox.id(), label, reason,
                                              progress_adapter(progress, "snapshot"));
    } catch (const std::exception& e) {
      throw state_error(e, codes::kSnapshotFailed, "could not snapshot the workspace");
    }
    info.frozen = frozen.thaw();
    info.freeze = frozen.how();
  }
  info.duration = std::chrono::milliseconds(ms_since(start));
  {
    std::lock_guard lock(sandbox.mutex_);
    sandbox.captured_ = Clock::now();
  }
  try {
    store_->prune(sandbox.id(), options_.keep_snapshots);
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: retention: {}", sandbox.id(), e.what());
  }
  if (replicator_) replicator_->nudge();  // its upload starts now, not at the next round
  return info;
}

SnapshotInfo ManagerImpl::snapshot(const std::string& conversation, const std::string& label, const ProgressFn& progress) {
  Lease lease = acquire(conversation, progress);
  auto& sandbox = static_cast<ManagedSandbox&>(lease.sandbox());  // the manager makes no other kind
  std::lock_guard life(sandbox.lifecycle_);
  return take_frozen(sandbox, label, "manual", progress);
}

void ManagerImpl::checkpoint_step(const std::shared_ptr<ManagedSandbox>& sandbox) {
  if (options_.checkpoint_interval.count() <= 0) return;
  {
    std::lock_guard lock(sandbox->mutex_);
    // Unchanged since it was captured: nothing a checkpoint would add.
    if (sandbox->last_used_ <= sandbox->captured_ || Clock::now() - sandbox->captured_ < options_.checkpoint_interval)
      return;
  }
  // Skipped while it starts, restores or tears down (tried again next tick).
  std::unique_lock life(sandbox->lifecycle_, std::try_to_lock);
  if (!life || !sandbox->running()) return;
  try {
    auto info = take_frozen(*sandbox, "", "checkpoint", {});
    spdlog::info("sandbox {}: checkpoint {} ({} entries, frozen {} ms)", sandbox->id(), info.record.id,
                 info.record.files, info.frozen ? info.frozen->count() : -1);
  } catch (const std::exception& e) {
    // Tried again one interval later; the live workspace is untouched.
    std::lock_guard lock(sandbox->mutex_);
    sandbox->captured_ = Clock::now();
    spdlog::error("sandbox {}: checkpoint failed: {}", sandbox->id(), e.what());
  }
}

SnapshotInfo ManagerImpl::restore(const std::string& conversation, const std::string& snapshot_id,
                              const ProgressFn& progress) {
  auto sandbox = entry(conversation);
  std::lock_guard life(sandbox->lifecycle_);
  take_lock(*sandbox);
  auto snapshot = snapshot_id.empty() ? catalog_->latest_snapshot(sandbox->id()) : catalog_->find_snapshot(snapshot_id);
  if (!snapshot || snapshot->sandbox != sandbox->id() || !snapshot->complete)
    throw SandboxError(codes::kSnapshotNotFound,
                       snapshot_id.empty() ? "this conversation has no snapshot yet; take one with sandbox_snapshot"
                                           : "no snapshot '" + snapshot_id + "' for this conversation; snapshot_list "
                                             "shows the ones there are");
  auto start = Clock::now();
  auto record = catalog_->find_sandbox(sandbox->id());
  if (sandbox->running()) {
    save_sessions(*sandbox, std::chrono::seconds(2));
    record_lost_processes(*sandbox);
    stop(*sandbox);
  }
  // A failure puts back what the catalog said (the target a stopped sandbox
  // restores next included); without a row, the live directories stand.
  restore_locked(*sandbox, *snapshot, progress, SandboxState::Active, record ? &*record : nullptr);
  start_agent(*sandbox);
  bring_back(*sandbox, *catalog_->find_sandbox(sandbox->id()));
  return {*snapshot, std::chrono::milliseconds(ms_since(start))};
}

}  // namespace agentbox::sandbox
