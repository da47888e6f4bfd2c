// The manager's side of the snapshot store (persistence/s3_store.h,
// docs/scale-out.md "Snapshots in S3"): the replicator started with the
// catalog, a conversation new to this server looked up in the store before
// a sandbox is made for it, and the store's view for snapshot_list.
#include "sandbox/manager_impl.h"

#include <spdlog/spdlog.h>

namespace agentbox::sandbox {

void ManagerImpl::open_store() {
  if (options_.snapshot_store.empty()) return;
  persistence::StoreLocation where;
  if (std::string why = persistence::parse_store_url(options_.snapshot_store, where); !why.empty())
    throw SandboxError(codes::kInvalidArguments, why);
  auto store = std::make_unique<persistence::RemoteStore>(where, layout_, *catalog_);
  // Asked once at start, so a wrong key or endpoint is said where the
  // operator sees it; the server runs either way (snapshots stay local and
  // are retried).
  try {
    store->check();
    spdlog::info("snapshot store: {} (the bucket answers and takes the credentials)", where.url);
  } catch (const std::exception& e) {
    spdlog::error("snapshot store: {}: {}; snapshots are kept here and copied when it answers", where.url, e.what());
  }
  replicator_ = std::make_unique<persistence::Replicator>(std::move(store), *catalog_);
}

void ManagerImpl::bring_from_store(const std::string& conversation) {
  if (!replicator_ || find(conversation) || catalog_->find_by_conversation(conversation)) return;
  std::lock_guard lock(import_mutex_);
  if (catalog_->find_by_conversation(conversation)) return;  // imported by the call before this one
  auto start = std::chrono::steady_clock::now();
  try {
    if (replicator_->prepare(conversation))
      spdlog::info("conversation '{}': brought from the snapshot store in {} ms", conversation, ms_since(start));
  } catch (const persistence::StoreError& e) {
    if (e.corrupt()) throw SandboxError(codes::kSnapshotCorrupt, e.what());
    // A new sandbox now could hide the conversation's snapshots in the store.
    throw SandboxError(codes::kSandboxStartFailed,
                       "cannot ask the snapshot store " + replicator_->store().where().url + " whether conversation '" +
                           conversation + "' has snapshots there: " + e.what() +
                           ". Nothing was started; call again once the store answers");
  } catch (const std::exception& e) {
    throw state_error(e, codes::kIoError, "could not bring conversation '" + conversation + "' from the snapshot store");
  }
}

std::optional<persistence::StoreStatus> ManagerImpl::store_status(const std::string& conversation) {
  if (!replicator_) return std::nullopt;
  auto record = catalog_->find_by_conversation(conversation);
  if (!record) return std::nullopt;
  return replicator_->status(record->id);
}

std::optional<persistence::StoreStatus> Manager::store_status(const std::string& conversation) {
  return impl_->store_status(conversation);
}

}  // namespace agentbox::sandbox
