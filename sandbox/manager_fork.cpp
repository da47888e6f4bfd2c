// Fork (docs/design.md section 9, "Fork"): new conversations that start from
// this one's workspace, home and sessions, and neither side sees the
// other's changes.
//
// Made now, where the driver clones storage (disk_pool.h): the source's
// processes and filesystem are frozen while its disk image is cloned once
// per fork (copy-on-write: milliseconds whatever its size); each clone is
// installed as the fork's disk and the fork recorded "active" with the
// source's sessions, so its first call starts a box on it like a sandbox
// after a server restart, services started again there. The order (clone
// under a name nothing adopts, conversation file, install, rows) leaves a
// crash at any step with no fork, or with one whole and adopted by
// recovery.
//
// Otherwise, and from a named snapshot: the snapshot (named, or taken now,
// frozen) is shared with each fork as an archive of its own (a hard link:
// archives are immutable), recorded with the fork's catalog rows in one
// transaction, and restored at the fork's first call like any stopped
// sandbox. That costs a snapshot at most, and the fork's first call pays
// the extraction.
#include "sandbox/frozen_box.h"
#include "sandbox/manager_impl.h"

#include <spdlog/spdlog.h>

namespace agentbox::sandbox {

using Clock = std::chrono::steady_clock;

ForkResult ManagerImpl::fork(const std::string& conversation, const std::string& snapshot_id,
                             const std::string& to_conversation, int count, const ProgressFn& progress) {
  auto start = Clock::now();
  if (count < 1 || count > 16)
    throw SandboxError(codes::kInvalidArguments, "count must be between 1 and 16, not " + std::to_string(count));
  if (!to_conversation.empty() && count != 1)
    throw SandboxError(codes::kInvalidArguments, "to_conversation names one fork: give count 1 or leave it out");
  if (to_conversation == conversation && !to_conversation.empty())
    throw SandboxError(codes::kInvalidArguments, "to_conversation must differ from this conversation");
  if (!to_conversation.empty() && (catalog_->find_by_conversation(to_conversation) || find(to_conversation)))
    throw SandboxError(codes::kInvalidArguments, "conversation '" + to_conversation +
                                                     "' already has a sandbox; name a new one, or sandbox_destroy it "
                                                     "there first");
  if (snapshot_id.empty() && driver_->clone_support().empty()) {
    std::vector<ForkInfo> names(static_cast<std::size_t>(count));
    for (auto& fork : names) {
      fork.conversation = to_conversation.empty() ? conversation + "-fork-" + persistence::random_hex(8) : to_conversation;
      fork.sandbox = persistence::random_hex(12);
    }
    auto result = fork_by_clone(conversation, names, progress);
    result.duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return result;
  }
  ForkResult result;
  std::string source_id;
  if (snapshot_id.empty()) {
    result.taken = snapshot(conversation, "", progress);  // frozen: one instant; sessions saved first
    result.source = result.taken.record;
    source_id = result.source.sandbox;
  } else {
    auto record = catalog_->find_by_conversation(conversation);
    auto found = catalog_->find_snapshot(snapshot_id);
    if (!record || !found || found->sandbox != record->id || !found->complete)
      throw SandboxError(codes::kSnapshotNotFound, "no snapshot '" + snapshot_id +
                                                       "' for this conversation; snapshot_list shows the ones there are");
    if (auto running = find(conversation); running && running->running()) save_sessions(*running, std::chrono::seconds(2));
    result.source = *found;
    source_id = record->id;
  }
  auto sessions = catalog_->sessions(source_id);
  for (int i = 0; i < count; ++i) {
    ForkInfo fork;
    fork.conversation = to_conversation.empty() ? conversation + "-fork-" + persistence::random_hex(8) : to_conversation;
    fork.sandbox = persistence::random_hex(12);
    persistence::SnapshotRecord own;
    try {
      own = store_->share(result.source, fork.sandbox);
    } catch (const std::exception& e) {
      throw state_error(e, codes::kIoError, "could not give the fork its copy of snapshot " + result.source.id);
    }
    bool added = false;
    try {
      added = catalog_->add_fork(fork.conversation, own, sessions);
    } catch (const std::exception& e) {
      std::error_code ec;
      std::filesystem::remove_all(layout_.snapshots(fork.sandbox), ec);
      throw state_error(e, codes::kIoError, "could not record the fork");
    }
    if (!added) {
      std::error_code ec;
      std::filesystem::remove_all(layout_.snapshots(fork.sandbox), ec);
      throw SandboxError(codes::kInvalidArguments, "conversation '" + fork.conversation +
                                                       "' already has a sandbox (made just now by another call)");
    }
    persistence::record_conversation(layout_, fork.sandbox, fork.conversation);
    inherit_policy(source_id, fork.sandbox);
    fork.snapshot = own.id;
    spdlog::info("sandbox {} ({}): forked from {} at snapshot {}", fork.sandbox, fork.conversation, source_id,
                 result.source.id);
    result.forks.push_back(std::move(fork));
  }
  result.duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return result;
}

ForkResult ManagerImpl::fork_by_clone(const std::string& conversation, const std::vector<ForkInfo>& names,
                                      const ProgressFn& progress) {
  auto start = Clock::now();
  Lease lease = acquire(conversation, progress);  // running: its storage is live
  auto& source = static_cast<ManagedSandbox&>(lease.sandbox());  // the manager makes no other kind
  std::lock_guard life(source.lifecycle_);
  auto reached = [this](const char* step) {
    if (options_.fork_reached) options_.fork_reached(step);
  };
  std::vector<std::filesystem::path> roots;
  for (const auto& fork : names) roots.push_back(layout_.sandbox(fork.sandbox));
  save_sessions(source, std::chrono::seconds(2));  // the shells answer before they are frozen
  auto sessions = catalog_->sessions(source.id());
  ForkResult result;
  result.cloned = true;
  Box* box;
  {
    std::lock_guard lock(source.mutex_);
    box = source.box_.get();  // stays while lifecycle_ is held
  }
  driver_->flush_storage(source.dirs());  // while it runs: the freeze then has little to write
  auto flushed = Clock::now();
  {
    FrozenBox frozen(box);
    try {
      driver_->clone_storage(source.dirs(), roots, [&] { reached("frozen"); });
    } catch (const std::exception& e) {
      throw state_error(e, codes::kIoError, "could not clone the workspace for the fork");
    }
    result.taken.frozen = frozen.thaw();
    result.taken.freeze = frozen.how();
  }
  reached("cloned");
  auto thawed = Clock::now();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& fork = names[i];
    auto undo = [&] {
      for (std::size_t j = i + 1; j < names.size(); ++j) driver_->discard_clone(roots[j]);
      driver_->discard_clone(roots[i]);
      driver_->drop_storage(roots[i]);
      std::error_code ec;
      std::filesystem::remove_all(layout_.snapshots(fork.sandbox), ec);
    };
    std::string made;
    for (const auto& done : result.forks) made += (made.empty() ? "" : ", ") + done.conversation;
    if (!made.empty()) made = " (the forks made before it stand: " + made + ")";
    bool added = false;
    try {
      persistence::record_conversation(layout_, fork.sandbox, fork.conversation);  // recovery adopts it from here
      driver_->install_clone(roots[i]);
      reached("installed");
      added = catalog_->add_clone(fork.conversation, fork.sandbox, sessions);
    } catch (const std::exception& e) {
      undo();
      throw state_error(e, codes::kIoError, "could not record the fork" + made);
    }
    if (!added) {
      undo();
      throw SandboxError(codes::kInvalidArguments, "conversation '" + fork.conversation +
                                                       "' already has a sandbox (made just now by another call)" + made);
    }
    reached("recorded");
    inherit_policy(source.id(), fork.sandbox);
    spdlog::info("sandbox {} ({}): forked from {} by cloning its disk (frozen {} ms)", fork.sandbox, fork.conversation,
                 source.id(), result.taken.frozen ? result.taken.frozen->count() : -1);
    result.forks.push_back(fork);
  }
  spdlog::info("fork of {}: sessions saved and storage flushed in {} ms, then frozen {} ms; installed and recorded in {} ms",
               source.id(), std::chrono::duration_cast<std::chrono::milliseconds>(flushed - start).count(),
               std::chrono::duration_cast<std::chrono::milliseconds>(thawed - flushed).count(), ms_since(thawed));
  return result;
}

}  // namespace agentbox::sandbox
