// Fork (docs/design.md section 9, "Fork"): new conversations that start from
// this one's workspace, home and sessions. The source's snapshot (named, or
// taken now with its processes frozen) is shared with each fork as an
// archive of its own (a hard link: archives are immutable), recorded with
// the fork's catalog rows in one transaction, and restored at the fork's
// first call like any stopped sandbox, services started again there. So the
// fork itself costs a snapshot at most (nothing with a named one), the
// source is paused only for the snapshot's freeze, and neither side sees
// the other's changes: they share no live file.
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
    fork.snapshot = own.id;
    spdlog::info("sandbox {} ({}): forked from {} at snapshot {}", fork.sandbox, fork.conversation, source_id,
                 result.source.id);
    result.forks.push_back(std::move(fork));
  }
  result.duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return result;
}

}  // namespace agentbox::sandbox
