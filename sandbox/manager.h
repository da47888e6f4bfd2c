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
//
// Boxes are run by a driver (driver.h); the manager's own state is private
// (manager_impl.h), and the spare made ahead is spare_pool.h's.
#pragma once

#include "network/policy.h"
#include "network/proxy.h"
#include "os/unique_fd.h"
#include "persistence/catalog.h"
#include "persistence/replicator.h"
#include "persistence/store.h"

#include "sandbox/agent_client.h"
#include "sandbox/bwrap_plan.h"
#include "sandbox/cgroups.h"
#include "sandbox/disk.h"
#include "sandbox/limits.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

class ManagerImpl;

struct ManagerOptions {
  std::filesystem::path state_dir;
  bool network_host = false;
  // `--network proxy` (docs/design.md section 10): the box keeps loopback
  // only, and its one way out is this proxy, listening on
  // 127.0.0.1:kProxyPortInside inside the box, under the conversation's
  // policy from this file. Both set, or both null.
  std::shared_ptr<network::Proxy> proxy;
  std::shared_ptr<const network::PolicyFile> network_policy;
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
  // Incremental snapshots (docs/design.md section 9): a snapshot holds only
  // what changed since the last one, up to this many in a chain before a
  // complete one starts the next; 1 makes every snapshot complete.
  std::size_t snapshot_chain = persistence::SnapshotStore::kDefaultMaxChain;
  // A sandbox used since its last snapshot gets a checkpoint (a snapshot,
  // reason "checkpoint", processes frozen) once its last one is this old,
  // so a host crash loses at most this much of a busy workspace; zero never.
  std::chrono::milliseconds checkpoint_interval{15 * 60 * 1000};
  // The warm cache (docs/design.md section 9, "Warm restore"): stopped
  // workspaces kept ready on disk, least recently used dropped first once
  // together they take more than this; 0 keeps none. None: 10% of the
  // state filesystem's free space when the manager starts.
  std::optional<std::uint64_t> warm_cache;
  // `serve --snapshot-store s3://bucket/prefix` (docs/scale-out.md): every
  // complete snapshot is copied there too, and a conversation this server
  // has no sandbox for is looked up there first. Empty: the state directory only.
  std::string snapshot_store;
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
  // Tests only: called at each step of a fork made by cloning ("frozen":
  // clones made, source still frozen; "cloned"; "installed"; "recorded"),
  // e.g. to kill the process there.
  std::function<void(const char* step)> fork_reached;
};

// Reports progress of a long restore or snapshot (bytes done, total if known).
using ProgressFn = std::function<void(double done, std::optional<double> total, const std::string& message)>;

// A conversation's sandbox as callers see it; the manager's bookkeeping of
// it (lease count, lifecycle lock, its box) is private (manager_impl.h).
class Sandbox {
 public:
  virtual ~Sandbox() = default;
  const std::string& id() const { return id_; }
  const std::string& conversation() const { return conversation_; }
  const SandboxDirs& dirs() const { return dirs_; }
  // Active, Starting, Snapshotting, Restoring, Stopped (torn down) or
  // Failed (the agent died); docs/design.md section 8 vocabulary.
  virtual persistence::SandboxState state() const = 0;
  virtual std::shared_ptr<AgentClient> client() const = 0;
  // Bytes the files under /workspace take on disk (a descriptor walk that
  // follows no symlink: persistence/tree_fs.h).
  std::uint64_t workspace_bytes() const;
  // The CPU quota its cgroup enforces, in CPUs; 0 when none.
  virtual double cpu_quota() const = 0;
  // Whether its cgroup holds its memory / process count (limits_report.cpp).
  virtual bool cgroup_memory() const = 0;
  virtual bool cgroup_pids() const = 0;

 protected:
  Sandbox() = default;
  std::string id_;
  std::string conversation_;
  SandboxDirs dirs_;
};

// What a snapshot call returns.
struct SnapshotInfo {
  persistence::SnapshotRecord record;
  std::chrono::milliseconds duration{0};
  // How long the box's processes were stopped while the snapshot read the
  // workspace (one instant); none when they were not, and freeze says why.
  std::optional<std::chrono::milliseconds> frozen;
  std::string freeze;  // how: "cgroup freezer" or "SIGSTOP"; or why not
};

// One fork (Manager::fork): the new conversation and its sandbox.
struct ForkInfo {
  std::string conversation;
  std::string sandbox;
  std::string snapshot;  // what its first call restores
};
struct ForkResult {
  std::vector<ForkInfo> forks;
  persistence::SnapshotRecord source;  // the snapshot the forks start from
  SnapshotInfo taken;  // when a snapshot was taken for the fork (its freeze); else record empty
  // Made now as clones of the source's storage (no snapshot: source and
  // taken.record empty, taken.frozen/freeze the freeze of the clone).
  bool cloned = false;
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
  // New conversations that start from this one's workspace, home and
  // sessions (docs/design.md section 9, "Fork"): from `snapshot_id`, or a
  // snapshot taken now (processes frozen, the source keeps running). Each
  // gets the snapshot's archive as its own (a hard link) and restores it at
  // its first call. to_conversation names the one fork (count 1); else
  // "<conversation>-fork-<hex>". Throws SandboxError (INVALID_ARGUMENT:
  // count, a conversation that exists; SNAPSHOT_NOT_FOUND).
  ForkResult fork(const std::string& conversation, const std::string& snapshot_id, const std::string& to_conversation,
                  int count, const ProgressFn& progress = {});
  // Replaces the workspace and home with a snapshot (the latest when id is
  // empty), killing running processes first. Returns the snapshot restored.
  SnapshotInfo restore(const std::string& conversation, const std::string& snapshot_id,
                       const ProgressFn& progress = {});
  std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation);
  // How the snapshot store holds this conversation's snapshots; none without
  // --snapshot-store, or for a conversation without a sandbox.
  std::optional<persistence::StoreStatus> store_status(const std::string& conversation);
  // The catalog's view of a conversation's sandbox (none if it never had one).
  std::optional<persistence::SandboxRecord> record(const std::string& conversation);
  // Idle teardown now, whatever the timer says (tests, the idle thread).
  // False when the sandbox is in use or not running.
  bool teardown(const std::string& conversation);

  persistence::Catalog& catalog();
  const persistence::StateLayout& layout() const;

  const ManagerOptions& options() const;
  // What is ready for the next new conversation: "none", "prepared" or "warm".
  std::string spare_state();
  // What the host gives sandboxes (the driver's report, driver.h).
  const CgroupSupport& cgroups() const;
  const Disks& disks() const;
  std::size_t running() const;

  // `--network proxy`: the policy in force for the conversation (null in the
  // other modes), and what its box's proxy denied at or after `since`.
  std::shared_ptr<const network::Policy> network_policy(const std::string& conversation) const;
  std::vector<network::Denial> network_denials(const std::string& conversation,
                                               std::chrono::system_clock::time_point since);
  // Unconnected TCP sockets in the leased sandbox's network namespace (an
  // exposed port's relay, ports.h). Throws SandboxError.
  std::vector<os::UniqueFd> sockets_inside(const Lease& lease, std::size_t count);

 private:
  std::unique_ptr<ManagerImpl> impl_;
};

}  // namespace agentbox::sandbox
