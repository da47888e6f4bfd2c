// The sandboxes as the tools layer sees them: the few verbs MCP tools need
// and nothing of how the manager keeps them (docs/design.md section 1). A
// lease on a conversation's running sandbox for agent calls, what
// sandbox_status shows, snapshot, restore, the snapshot list, destroy, and
// the limits the server applies itself. ManagerSandboxes
// (manager_sandboxes.h) implements it over the Manager; a test of a tool's
// own logic may implement it in the test.
#pragma once

#include "network/proxy.h"
#include "persistence/catalog.h"
#include "persistence/replicator.h"

#include "sandbox/agent_client.h"
#include "sandbox/disk.h"
#include "sandbox/limits.h"
#include "sandbox/ports.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

// Reports progress of a long restore or snapshot (bytes done, total if
// known); the same type as the manager's.
using ProgressFn = std::function<void(double done, std::optional<double> total, const std::string& message)>;

// A conversation's running sandbox, held for one call: it is not evicted or
// torn down at idle until the lease is destroyed.
class SandboxLease {
 public:
  virtual ~SandboxLease() = default;
  virtual std::shared_ptr<AgentClient> agent() const = 0;
  // Non-empty when the sandbox had to be restarted: what the caller lost.
  virtual const std::string& notice() const = 0;
};

// A snapshot taken or restored, and how long that took.
struct SnapshotDone {
  persistence::SnapshotRecord record;
  std::chrono::milliseconds duration{0};
  std::optional<std::chrono::milliseconds> frozen;  // processes stopped this long (one instant); none: not frozen
  std::string freeze;  // how it was frozen, or why not
};

// What sandbox_fork made: each new conversation and its sandbox, and the
// snapshot they start from (taken now: its freeze, as for a snapshot).
struct Forked {
  struct Fork {
    std::string conversation;
    std::string sandbox;
  };
  std::vector<Fork> forks;
  persistence::SnapshotRecord from;
  bool taken = false;  // from a snapshot taken for the fork
  bool cloned = false;  // made now as copy-on-write clones of the workspace (no snapshot: from empty)
  std::optional<std::chrono::milliseconds> frozen;
  std::string freeze;
  std::chrono::milliseconds duration{0};
};

// A conversation's sandbox as this server runs it (SandboxView::running).
// Outside SandboxView: clang 14 cannot default-construct a nested struct with
// member initializers inside std::optional before the enclosing class ends.
struct SandboxRunning {
  persistence::SandboxState state = persistence::SandboxState::None;  // docs/design.md section 8 vocabulary
  std::uint64_t workspace_bytes = 0;  // 0 when stopped (its live directories are gone)
  // Its own filesystem (disk.h): the limit and the inodes used.
  std::optional<std::uint64_t> disk_limit_bytes;
  std::uint64_t disk_inodes = 0;
  json limits;  // when active: the limits its cgroup took
  // Asks its agent for {sessions, processes}; empty when the agent is not
  // alive. Throws SandboxError.
  std::function<json()> agent_status;
};

// What is known of a conversation's sandbox without starting or restoring
// it: the catalog's record, and what this server runs.
struct SandboxView {
  std::string sandbox;        // its id; empty when the conversation never had one
  // The catalog's state (Active there: some server ran it), and its text as
  // stored (persistence::stored_state: the word of a state this build does
  // not know included).
  persistence::SandboxState catalog_state = persistence::SandboxState::None;
  std::string catalog_state_text;
  std::vector<std::string> sessions;  // the session names the catalog keeps
  std::optional<persistence::SnapshotRecord> last_snapshot;
  DiskSupport disks;  // whether sandboxes get their own filesystem, or why not
  json limits;        // which limits a sandbox started now gets, and how they hold (limits_report.h)
  using Running = SandboxRunning;
  std::optional<Running> running;  // set when the sandbox runs in this server
};

// What sandbox_destroy did.
struct Destroyed {
  bool destroyed = false;  // false: there was nothing to destroy
  std::string sandbox;     // the catalog's id of what was destroyed; empty when none
  std::size_t snapshots_kept = 0;
};

// What network_status shows (docs/design.md section 10).
struct NetworkView {
  std::string mode = "none";  // "none", "host" or "proxy"
  std::string proxy;          // proxy mode: the proxy's URL inside the box
  json policy;                // proxy mode: the conversation's policy (Policy::describe); else null
  std::vector<network::Denial> denials;  // its box's recent denials, oldest first
};

class Sandboxes {
 public:
  virtual ~Sandboxes() = default;

  // The conversation's running sandbox, started, restored or restarted as
  // needed (the lease's notice says what happened). Throws SandboxError.
  virtual std::unique_ptr<SandboxLease> acquire(const std::string& conversation, const ProgressFn& progress) = 0;
  // A lease only when the sandbox runs and nothing starts, restores or stops
  // it: never blocks; null otherwise (then acquire()).
  virtual std::unique_ptr<SandboxLease> try_acquire(const std::string& conversation) = 0;
  // The agent of the conversation's running sandbox, without a lease: it
  // neither counts as use nor keeps the sandbox from an idle teardown, and
  // its calls fail once the sandbox goes. For waits that watch a sandbox
  // without keeping it up (resource subscriptions). Null when the sandbox
  // does not run; never starts, restores or blocks on one.
  virtual std::shared_ptr<AgentClient> running_agent(const std::string& conversation) {
    (void)conversation;
    return nullptr;
  }

  // Never starts or restores a sandbox.
  virtual SandboxView status(const std::string& conversation) = 0;
  // Newest first.
  virtual std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation) = 0;
  // The snapshot store's copy (--snapshot-store); none without one.
  virtual std::optional<persistence::StoreStatus> store_status(const std::string&) { return std::nullopt; }
  // Snapshots the workspace and home (starting the sandbox if needed).
  virtual SnapshotDone snapshot(const std::string& conversation, const std::string& label,
                                const ProgressFn& progress) = 0;
  // Replaces the workspace and home with a snapshot (the latest when id is
  // empty). Throws SandboxError (SNAPSHOT_NOT_FOUND, SNAPSHOT_CORRUPT, ...).
  virtual SnapshotDone restore(const std::string& conversation, const std::string& snapshot_id,
                               const ProgressFn& progress) = 0;
  // New conversations starting from this one's workspace, home and
  // sessions (Manager::fork). Throws SandboxError.
  virtual Forked fork(const std::string& conversation, const std::string& snapshot_id,
                      const std::string& to_conversation, int count, const ProgressFn& progress) = 0;
  // Stops the sandbox and deletes its files, and its snapshots unless
  // keep_snapshots.
  virtual Destroyed destroy(const std::string& conversation, bool keep_snapshots) = 0;

  // Exposed ports (ports.h, docs/design.md section 12); none of them starts
  // or restores a sandbox. Throw SandboxError.
  virtual ExposedPort expose_port(const std::string& conversation, int port, std::optional<int> host_port) {
    (void)conversation, (void)port, (void)host_port;
    throw SandboxError(codes::kSandboxUnavailable, "this server exposes no ports");
  }
  virtual std::vector<ExposedPort> exposed_ports(const std::string& conversation) {
    (void)conversation;
    return {};
  }
  virtual bool unexpose_port(const std::string& conversation, int port) {
    (void)conversation, (void)port;
    return false;
  }

  // Code contexts (docs/design.md section 12) as the catalog keeps them,
  // under the id of the conversation's sandbox (the same over teardown and
  // restore; sandbox_destroy drops them). Reads give nothing for a
  // conversation without a sandbox; the writes need one (acquire first).
  // add_code_context is false when the sandbox has the most it may;
  // add_code_cell false when the context holds the most cells or code it
  // may. Throw SandboxError (and CatalogError on a full disk).
  virtual bool add_code_context(const std::string& conversation, const std::string& id, const std::string& language) {
    (void)conversation, (void)id, (void)language;
    throw SandboxError(codes::kSandboxUnavailable, "this server keeps no code contexts");
  }
  virtual std::vector<persistence::CodeContextRecord> code_contexts(const std::string& conversation) {
    (void)conversation;
    return {};
  }
  virtual bool add_code_cell(const std::string& conversation, const std::string& id, const std::string& code) {
    (void)conversation, (void)id, (void)code;
    return false;
  }
  virtual std::vector<std::string> code_cells(const std::string& conversation, const std::string& id) {
    (void)conversation, (void)id;
    return {};
  }
  virtual bool remove_code_context(const std::string& conversation, const std::string& id) {
    (void)conversation, (void)id;
    return false;
  }

  // The limits the server applies itself: command timeouts, the inline cap.
  virtual const Limits& limits() const = 0;
  // The network the conversation's sandbox has; never starts one.
  virtual NetworkView network(const std::string& conversation) {
    (void)conversation;
    return {};
  }
  // Proxy mode: what the proxy denied the conversation's running box at or
  // after `since` (what an exec result lists); never blocks on a start.
  virtual std::vector<network::Denial> network_denials(const std::string& conversation,
                                                       std::chrono::system_clock::time_point since) {
    (void)conversation, (void)since;
    return {};
  }
};

}  // namespace agentbox::sandbox
