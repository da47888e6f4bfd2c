// The manager's private state (manager.h is its public face): the map of
// conversations to sandboxes, the per-sandbox bookkeeping, the idle thread,
// the spare pool and the driver that runs the boxes. Included only by
// manager*.cpp. Lock order: a sandbox's lifecycle_, then ManagerImpl::mutex_
// (never held while a sandbox starts), then a sandbox's mutex_.
#pragma once

#include "persistence/sandbox_lock.h"
#include "sandbox/driver.h"
#include "sandbox/manager.h"
#include "sandbox/net_namespace.h"
#include "sandbox/spare_pool.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace agentbox::sandbox {

// A sandbox with the manager's bookkeeping of it.
class ManagedSandbox final : public Sandbox {
 public:
  persistence::SandboxState state() const override;
  std::shared_ptr<AgentClient> client() const override;
  double cpu_quota() const override;
  bool cgroup_memory() const override;
  bool cgroup_pids() const override;

  bool running() const;  // the agent is alive

  mutable std::mutex mutex_;
  std::shared_ptr<AgentClient> client_;
  std::unique_ptr<Box> box_;  // what the driver runs; null once stopped
  std::chrono::steady_clock::time_point last_used_;
  int in_use_ = 0;
  // Held while starting, snapshotting, restoring or tearing down; taken
  // before mutex_ (never the other way).
  std::mutex lifecycle_;
  std::optional<persistence::SandboxState> phase_;  // Starting, Snapshotting or Restoring while that runs; guarded by mutex_
  bool torn_down_ = false;  // stopped by an idle teardown (restore on next call); guarded by mutex_
  std::string kept_live_;  // why the last idle teardown kept the live workspace; guarded by mutex_
  persistence::SandboxLock lock_;  // this server drives the sandbox; guarded by lifecycle_
  std::chrono::steady_clock::time_point sessions_saved_;
  // When its workspace was last captured (started, restored or snapshotted):
  // what the checkpoint interval counts from; guarded by mutex_.
  std::chrono::steady_clock::time_point captured_;
  std::shared_ptr<AgentClient> previous_client_;  // outlives a restart, for leases still holding it
  std::unique_ptr<PreparedSandbox> prepared_;  // claimed when the conversation was new; used by its first start
  bool owner_recorded_ = false;  // catalog owner_pid set for the lock held; guarded by lifecycle_

  friend class ManagerImpl;
};

// Shared by the manager's files.
std::int64_t ms_since(std::chrono::steady_clock::time_point start);
persistence::ArchiveProgressFn progress_adapter(const ProgressFn& progress, const std::string& what);

class ManagerImpl {
 public:
  explicit ManagerImpl(ManagerOptions options);
  ~ManagerImpl();

  // Manager's public calls (manager.h says what they do).
  Lease acquire(const std::string& conversation, const ProgressFn& progress);
  std::optional<Lease> try_acquire(const std::string& conversation);
  std::shared_ptr<ManagedSandbox> find(const std::string& conversation);
  bool destroy(const std::string& conversation, bool keep_snapshots);
  void shutdown();
  SnapshotInfo snapshot(const std::string& conversation, const std::string& label, const ProgressFn& progress);
  SnapshotInfo restore(const std::string& conversation, const std::string& snapshot_id, const ProgressFn& progress);
  ForkResult fork(const std::string& conversation, const std::string& snapshot_id, const std::string& to_conversation,
                  int count, const ProgressFn& progress);
  std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation);
  std::optional<persistence::StoreStatus> store_status(const std::string& conversation);
  // fork() made now where the driver clones storage (manager_fork.cpp).
  ForkResult fork_by_clone(const std::string& conversation, const std::vector<ForkInfo>& names,
                           const ProgressFn& progress);
  std::optional<persistence::SandboxRecord> record(const std::string& conversation);
  bool teardown(const std::string& conversation);
  std::size_t running() const;

  // Starts the sandbox's agent on its directories; the caller holds its
  // lifecycle_, not mutex_.
  void start_agent(ManagedSandbox& sandbox);
  // A spare (ManagerOptions::spare) built on the pool's thread.
  std::unique_ptr<PreparedSandbox> build_spare(bool warm);
  // Sandboxes active or starting, besides `starting`.
  std::size_t running_locked(const ManagedSandbox& starting) const;
  // The least recently used idle sandbox to stop so that one more may start
  // (at most max_sandboxes active or starting), or null.
  std::shared_ptr<ManagedSandbox> pick_eviction_locked(const ManagedSandbox& starting);
  void stop(ManagedSandbox& sandbox);
  // `--network proxy`: the box's listener handed to the proxy under the
  // conversation's policy, before anything runs in it (manager_network.cpp).
  void attach_proxy(ManagedSandbox& sandbox, Box& box);
  // The policy a sandbox runs under (docs/network.md, "The policy in
  // force"): the policy file's entry for its key, which the catalog keeps
  // (its own conversation, or a fork's source's). record: the catalog's copy
  // brought up to date (a start); otherwise only read (network_status).
  std::shared_ptr<const network::Policy> policy_in_force(const std::string& sandbox, const std::string& conversation,
                                                         bool record);
  // A fork runs under its source's policy (nothing without --network proxy).
  void inherit_policy(const std::string& source, const std::string& fork);
  // Stops a sandbox picked to make room, unless a call took it in the
  // meantime (then the cap is exceeded until that call ends).
  void evict(ManagedSandbox& sandbox);
  std::shared_ptr<ManagedSandbox> entry(const std::string& conversation, bool claim_spare = false);
  void take_lock(ManagedSandbox& sandbox);
  void release_lock(ManagedSandbox& sandbox);
  void save_sessions(ManagedSandbox& sandbox, std::chrono::milliseconds timeout);
  // Returns a notice for the call (services started again), or empty.
  std::string bring_back(ManagedSandbox& sandbox, const persistence::SandboxRecord& record);
  std::string restore_locked(ManagedSandbox& sandbox, const persistence::SnapshotRecord& snapshot,
                             const ProgressFn& progress, persistence::SandboxState state_on_failure,
                             const persistence::SandboxRecord* before = nullptr);
  void record_lost_processes(ManagedSandbox& sandbox);
  bool teardown(const std::shared_ptr<ManagedSandbox>& sandbox);
  // A snapshot of a running sandbox, its processes frozen while the
  // workspace is read (manager_snapshots.cpp); the caller holds lifecycle_.
  SnapshotInfo take_frozen(ManagedSandbox& sandbox, const std::string& label, const std::string& reason,
                           const ProgressFn& progress);
  // A checkpoint of a sandbox used since its workspace was last captured,
  // once that is checkpoint_interval old (idle thread).
  void checkpoint_step(const std::shared_ptr<ManagedSandbox>& sandbox);
  void idle_main();
  std::optional<std::string> idle_step(const std::shared_ptr<ManagedSandbox>& sandbox,
                                       std::chrono::steady_clock::time_point last_used);
  void open_catalog();
  // The snapshot store (manager_store.cpp): started with the catalog; a
  // conversation this server has no sandbox for is imported from it first.
  void open_store();
  void bring_from_store(const std::string& conversation);
  // Drops the least recently parked warm copies until the rest fit
  // warm_budget_ (manager_warm.cpp); copies of sandboxes another server
  // drives are left. Logs what it drops; throws nothing.
  void evict_warm() noexcept;
  // The warm cache's bound in bytes (ManagerOptions::warm_cache, resolved).
  void resolve_warm_budget();
  std::string resume_stopped(ManagedSandbox& sandbox, const persistence::SandboxRecord& record,
                             const ProgressFn& progress);
  SandboxError state_error(const std::exception& e, const std::string& code, const std::string& what) const;
  // As root, the sandbox's host ids from the catalog (allocated on first
  // use; manager_uids.cpp) into dirs.owner; the owner restored files get.
  void check_uid_range();
  void assign_owner(const std::string& id, SandboxDirs& dirs);
  void assign_spare_owner(PreparedSandbox& spare);
  std::optional<std::pair<unsigned, unsigned>> owner(ManagedSandbox& sandbox);

  ManagerOptions options_;
  bool root_ = false;
  persistence::IdRange uid_range_;  // root only
  persistence::StateLayout layout_;
  std::unique_ptr<Driver> driver_;
  mutable std::mutex mutex_;  // guards sandboxes_; never held while a sandbox starts
  std::map<std::string, std::shared_ptr<ManagedSandbox>> sandboxes_;
  std::unique_ptr<persistence::Catalog> catalog_;
  std::unique_ptr<persistence::SnapshotStore> store_;
  std::uint64_t warm_budget_ = 0;
  std::mutex idle_mutex_;
  std::condition_variable idle_wake_;
  bool stopping_ = false;  // guarded by idle_mutex_
  // Sandboxes whose idle teardown failed (a full disk): not retried before then.
  std::map<std::string, std::chrono::steady_clock::time_point> idle_backoff_;  // guarded by idle_mutex_
  std::thread idle_thread_;
  std::unique_ptr<persistence::Replicator> replicator_;  // none without --snapshot-store
  std::mutex import_mutex_;                              // one import from the store at a time
  std::unique_ptr<SparePool> spares_;  // last member: its thread builds with the ones above
};

}  // namespace agentbox::sandbox
