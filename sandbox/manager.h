// Conversations to sandboxes. The manager starts a sandbox on a
// conversation's first call, keeps at most max_sandboxes running (the least
// recently used idle one is stopped to make room), restarts a sandbox whose
// agent died (telling the next caller what was lost), and destroys them.
//
// Persistence (docs/persistence.md): the conversation → sandbox mapping,
// sessions and snapshots live in the catalog under the state directory, so
// a restarted server finds the same workspace and sessions. A sandbox idle
// for idle_timeout (no call, no foreground command; background processes
// keep it up to background_keepalive) is snapshotted, stopped and its live
// directories removed; the next call restores it transparently. One server
// drives a sandbox at a time (a flock per sandbox); another waits up to
// lock_wait, then gets SANDBOX_BUSY.
#pragma once

#include "persistence/catalog.h"
#include "persistence/sandbox_lock.h"
#include "persistence/store.h"

#include "sandbox/agent_client.h"
#include "sandbox/bwrap_plan.h"
#include "sandbox/cgroups.h"
#include "sandbox/disk.h"
#include "sandbox/limits.h"

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::sandbox {

struct ManagerOptions {
  std::filesystem::path state_dir;
  bool network_host = false;
  Limits limits;
  std::size_t max_sandboxes = 8;
  std::string bwrap = "/usr/bin/bwrap";
  // The agent executable and the arguments that select agent mode; empty
  // means agentbox-agent next to this binary, else this binary with "agent".
  std::filesystem::path agent_binary;
  std::vector<std::string> agent_args = {"agent"};
  // Host ids a root server gives its sandboxes, one uid and gid each
  // (sandbox/uid_range.h); none: the agentbox /etc/subuid entry or the default.
  std::optional<persistence::IdRange> uid_range;
  std::chrono::milliseconds start_timeout{10'000};
  // Snapshot and stop a sandbox idle this long; zero never does.
  std::chrono::milliseconds idle_timeout{10 * 60 * 1000};
  // Running background processes keep a sandbox from idling for this long
  // after the last call, at most.
  std::chrono::milliseconds background_keepalive{60 * 60 * 1000};
  // Unlabelled snapshots kept per sandbox (labelled ones are always kept).
  std::size_t keep_snapshots = 5;
  // A snapshot or restore still running after this is stopped and fails.
  std::chrono::milliseconds snapshot_timeout = persistence::kDefaultArchiveTimeout;
  // How long a call waits for a sandbox another server drives.
  std::chrono::milliseconds lock_wait{10'000};
  // What is made ready ahead of the next new conversation (docs/sandbox.md
  // "Cold start"). None: nothing, each new conversation builds its sandbox
  // from scratch. Prepared: its directories, cgroup and lock, and a launcher
  // process already in the cgroup that waits to exec bwrap (the cgroup join,
  // ~10 ms on cgroup v1, is paid ahead). Warm: a whole spare sandbox (bwrap,
  // agent and default shell running) that the next new conversation claims;
  // it counts toward max_sandboxes. Replaced in the background once no start
  // is in progress.
  enum class Spare { None, Prepared, Warm };
  Spare spare = Spare::Prepared;
  // Each sandbox's own filesystem (disk.h); where a host cannot, none.
  DiskOptions disk;
};

// A sandbox made ready before its conversation exists (ManagerOptions::spare);
// owned by the manager until a new conversation claims it. Destroying an
// unclaimed one ends its processes and removes its cgroup and directories.
struct PreparedSandbox {
  std::string id;
  SandboxDirs dirs;
  persistence::SandboxLock lock;
  std::unique_ptr<Cgroup> cgroup;
  std::shared_ptr<AgentClient> client;  // waiting at the gate, or (warm) running
  int gate = -1;                        // write end: a line releases the launcher, EOF ends it
  std::function<void()> release_owner;  // gives its host ids back once its directories are gone
  bool warm = false;
  bool claimed = false;  // its directories belong to a conversation now
  const Disks* disks = nullptr;  // drops its image when unclaimed
  PreparedSandbox() = default;
  PreparedSandbox(const PreparedSandbox&) = delete;
  PreparedSandbox& operator=(const PreparedSandbox&) = delete;
  ~PreparedSandbox();
  // Lets the launcher exec bwrap (once).
  void release_gate();
};

// Reports progress of a long restore or snapshot (bytes done, total if known).
using ProgressFn = std::function<void(double done, std::optional<double> total, const std::string& message)>;

class Sandbox {
 public:
  const std::string& id() const { return id_; }
  const std::string& conversation() const { return conversation_; }
  const SandboxDirs& dirs() const { return dirs_; }
  // "active", "snapshotting", "restoring", "stopped" (torn down) or
  // "failed" (the agent died); docs/design.md section 8 vocabulary.
  std::string state() const;
  std::shared_ptr<AgentClient> client() const;
  // Bytes the files under /workspace take on disk (a descriptor walk that
  // follows no symlink: persistence/tree_fs.h).
  std::uint64_t workspace_bytes() const;
  // The CPU quota its cgroup enforces, in CPUs; 0 when none.
  double cpu_quota() const;
  // Whether its cgroup holds its memory / process count (limits_report.cpp).
  bool cgroup_memory() const;
  bool cgroup_pids() const;

 private:
  bool running() const;  // the agent is alive
  friend class Manager;
  friend class Lease;
  std::string id_;
  std::string conversation_;
  SandboxDirs dirs_;
  mutable std::mutex mutex_;
  std::shared_ptr<AgentClient> client_;
  std::unique_ptr<Cgroup> cgroup_;
  std::chrono::steady_clock::time_point last_used_;
  int in_use_ = 0;
  // Held while starting, snapshotting, restoring or tearing down; taken
  // before mutex_ (never the other way).
  std::mutex lifecycle_;
  std::string phase_;  // "starting", "snapshotting" or "restoring" while that runs; guarded by mutex_
  bool torn_down_ = false;  // stopped by an idle teardown (restore on next call); guarded by mutex_
  std::string kept_live_;  // why the last idle teardown kept the live workspace; guarded by mutex_
  persistence::SandboxLock lock_;  // this server drives the sandbox; guarded by lifecycle_
  std::chrono::steady_clock::time_point sessions_saved_;
  std::shared_ptr<AgentClient> previous_client_;  // outlives a restart, for leases still holding it
  std::unique_ptr<PreparedSandbox> prepared_;  // claimed when the conversation was new; used by its first start
  bool owner_recorded_ = false;  // catalog owner_pid set for the lock held; guarded by lifecycle_
};

// What a snapshot call returns.
struct SnapshotInfo {
  persistence::SnapshotRecord record;
  std::chrono::milliseconds duration{0};
};

// A sandbox held for one call; releases on destruction (for LRU accounting).
class Lease {
 public:
  Lease(std::shared_ptr<Sandbox> sandbox, std::string notice);
  ~Lease();
  Lease(Lease&&) = default;
  Sandbox& sandbox() const { return *sandbox_; }
  AgentClient& agent() const;
  // Non-empty when the sandbox had to be restarted: what the caller lost.
  const std::string& notice() const { return notice_; }

 private:
  std::shared_ptr<Sandbox> sandbox_;
  std::string notice_;
};

class Manager {
 public:
  explicit Manager(ManagerOptions options);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // The conversation's running sandbox, started, restored from its snapshot
  // (after an idle teardown) or restarted as needed; the lease's notice says
  // what happened. Throws SandboxError (SANDBOX_START_FAILED, SANDBOX_BUSY,
  // SNAPSHOT_FAILED) with a plain explanation.
  Lease acquire(const std::string& conversation, const ProgressFn& progress = {});
  // A lease on the conversation's sandbox only when it is running and no
  // start, restore, teardown or destroy holds it: never blocks, so a caller
  // on a shared thread can take the quick path and fall back to acquire().
  std::optional<Lease> try_acquire(const std::string& conversation);
  // The sandbox if it runs in this server, without starting one.
  std::shared_ptr<Sandbox> find(const std::string& conversation);
  // Stops the sandbox and deletes its directories (and its snapshots unless
  // keep_snapshots). False when there was none.
  bool destroy(const std::string& conversation, bool keep_snapshots = false);
  // Stops every sandbox, keeping their directories (server shutdown); the
  // sessions are saved first. Returns within about a second.
  void shutdown();

  // Snapshots the conversation's workspace and home (starting the sandbox
  // if needed); labelled snapshots are kept by retention.
  SnapshotInfo snapshot(const std::string& conversation, const std::string& label, const ProgressFn& progress = {});
  // Replaces the workspace and home with a snapshot (the latest when id is
  // empty), killing running processes first. Returns the snapshot restored.
  SnapshotInfo restore(const std::string& conversation, const std::string& snapshot_id,
                       const ProgressFn& progress = {});
  std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation);
  // The catalog's view of a conversation's sandbox (none if it never had one).
  std::optional<persistence::SandboxRecord> record(const std::string& conversation);
  // Idle teardown now, whatever the timer says (tests, the idle thread).
  // False when the sandbox is in use or not running.
  bool teardown(const std::string& conversation);

  persistence::Catalog& catalog() { return *catalog_; }
  const persistence::StateLayout& layout() const { return layout_; }

  const ManagerOptions& options() const { return options_; }
  // What is ready for the next new conversation: "none", "prepared" or "warm".
  std::string spare_state();
  const CgroupSupport& cgroups() const { return cgroups_; }
  const Disks& disks() const { return *disks_; }
  std::size_t running() const;

 private:
  // Starts the sandbox's agent on its directories; the caller holds its
  // lifecycle_, not mutex_.
  void start_agent(Sandbox& sandbox);
  void prepare_dirs(const SandboxDirs& dirs, const BwrapOptions& plan);
  BwrapOptions plan_for(const SandboxDirs& dirs) const;
  LaunchSpec launch_spec(BwrapOptions plan, const Cgroup* cgroup) const;
  // The spare (ManagerOptions::spare): built on spare_thread_, claimed by
  // entry() for a new conversation.
  std::unique_ptr<PreparedSandbox> build_spare(bool warm);
  std::unique_ptr<PreparedSandbox> take_spare();
  void spare_main();
  void stop_spare();
  // Empty cgroups of sandboxes no server drives (a crash leaves them).
  void remove_stale_cgroups();
  // The least recently used idle sandbox to stop so that one more may start
  // (at most max_sandboxes active or starting), or null.
  // Sandboxes active or starting, besides `starting`.
  std::size_t running_locked(const Sandbox& starting) const;
  std::shared_ptr<Sandbox> pick_eviction_locked(const Sandbox& starting);
  void stop(Sandbox& sandbox);
  // Stops a sandbox picked to make room, unless a call took it in the
  // meantime (then the cap is exceeded until that call ends).
  void evict(Sandbox& sandbox);
  std::shared_ptr<Sandbox> entry(const std::string& conversation, bool claim_spare = false);
  void take_lock(Sandbox& sandbox);
  void release_lock(Sandbox& sandbox);
  void save_sessions(Sandbox& sandbox, std::chrono::milliseconds timeout);
  void bring_back(Sandbox& sandbox, const persistence::SandboxRecord& record);
  std::string restore_locked(Sandbox& sandbox, const persistence::SnapshotRecord& snapshot, const ProgressFn& progress,
                             const std::string& state_on_failure);
  void record_lost_processes(Sandbox& sandbox);
  bool teardown(const std::shared_ptr<Sandbox>& sandbox);
  void idle_main();
  std::optional<std::string> idle_step(const std::shared_ptr<Sandbox>& sandbox,
                                       std::chrono::steady_clock::time_point last_used);
  void open_catalog();
  std::string resume_stopped(Sandbox& sandbox, const persistence::SandboxRecord& record, const ProgressFn& progress);
  SandboxError state_error(const std::exception& e, const std::string& code, const std::string& what) const;
  // As root, the sandbox's host ids from the catalog (allocated on first
  // use; manager_uids.cpp) into dirs.owner; the owner restored files get.
  void check_uid_range();
  void assign_owner(const std::string& id, SandboxDirs& dirs);
  void assign_spare_owner(PreparedSandbox& spare);
  std::optional<std::pair<unsigned, unsigned>> owner(Sandbox& sandbox);

  ManagerOptions options_;
  CgroupSupport cgroups_;
  std::unique_ptr<Disks> disks_;
  bool root_ = false;
  persistence::IdRange uid_range_;  // root only
  std::optional<AgentCopy> agent_copy_;
  std::filesystem::path agent_binary_;  // agent_copy_'s path
  int agent_fd_ = -1;  // O_PATH fd of agent_binary_, bound into each sandbox by bwrap
  mutable std::mutex mutex_;  // guards sandboxes_; never held while a sandbox starts
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  persistence::StateLayout layout_;
  std::unique_ptr<persistence::Catalog> catalog_;
  std::unique_ptr<persistence::SnapshotStore> store_;
  std::mutex idle_mutex_;
  std::condition_variable idle_wake_;
  bool stopping_ = false;  // guarded by idle_mutex_
  // Sandboxes whose idle teardown failed (a full disk): not retried before then.
  std::map<std::string, std::chrono::steady_clock::time_point> idle_backoff_;  // guarded by idle_mutex_
  std::thread idle_thread_;
  std::mutex spare_mutex_;
  std::condition_variable spare_wake_;
  std::unique_ptr<PreparedSandbox> spare_;  // guarded by spare_mutex_
  bool spare_wanted_ = false;               // refill once no start is in progress; guarded by spare_mutex_
  int starting_ = 0;                        // starts in progress; guarded by spare_mutex_
  bool spare_stopping_ = false;             // guarded by spare_mutex_
  std::thread spare_thread_;
};

}  // namespace agentbox::sandbox
