// The catalog: one SQLite database per state directory (WAL mode) holding
// conversations → sandboxes, each sandbox's sessions (working directory and
// the saved shell state), and its snapshots. The schema is versioned with
// PRAGMA user_version and upgraded by numbered migrations on open; two
// servers may open the same file at once (SQLite's locking plus a busy
// timeout), every multi-statement change is one IMMEDIATE transaction.
//
// Knows nothing about sandboxes' processes or MCP: it stores rows.
#pragma once

#include "persistence/sandbox_state.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct sqlite3;

namespace agentbox::persistence {

class CatalogError : public std::runtime_error {
 public:
  explicit CatalogError(const std::string& what, int sqlite_code = 0) : std::runtime_error(what), code_(sqlite_code) {}
  // SQLite's primary result code (SQLITE_FULL on a full disk), 0 when none.
  int sqlite_code() const { return code_; }
  bool disk_full() const;

 private:
  int code_;
};

// A sandbox's row. Its state (sandbox_state.h) is what a crash leaves for
// recovery: Active means the live directories are the truth; Stopped means
// the latest complete snapshot is (the live directories, if any, hold
// nothing newer and may be discarded).
struct SandboxRecord {
  std::string id;
  std::string conversation;
  SandboxState state = SandboxState::None;
  std::string created_at;
  std::string updated_at;
  std::int64_t owner_pid = 0;  // the server driving it, 0 when none (informational; the lock decides)
  // Set while state is "restoring": the snapshot being swapped in. A crash
  // then leaves "stopped" with this target, so the next call finishes it.
  std::string restore_snapshot;
  // JSON array of the background processes the last teardown ended.
  std::string lost_processes = "[]";
  // The stored text when state is Unknown (written by another version):
  // shown as stored, and what put_back_state writes back.
  std::string unknown_state;
};

// The state's text as stored: state_name, or unknown_state for Unknown.
std::string stored_state(const SandboxRecord& record);

struct SessionRecord {
  std::string name;
  std::string cwd;
  std::string state;  // the shell state script the agent saved (variables, functions, cwd)
};

struct SnapshotRecord {
  std::string id;
  std::string sandbox;
  std::string created_at;
  std::uint64_t bytes = 0;   // archive size on disk
  std::uint64_t files = 0;   // entries archived
  std::string digest;        // "sha256:<hex>" of the archive file
  std::string label;         // empty when none
  std::string path;          // relative to the state directory
  std::string reason;        // manual, idle, recovered
  bool complete = false;     // false between "about to rename" and "renamed"
  bool removing = false;     // being deleted (complete = 2): its file may be gone already
  // Incremental snapshots: the snapshot this archive holds the changes
  // since (its restore extracts that one's chain first), empty when the
  // archive is complete by itself.
  std::string parent;
  // Not stored: what restoring it reads (its chain's archives), filled in
  // for snapshot_list (SnapshotStore::total_bytes).
  std::uint64_t total_bytes = 0;
};

// The host uid and gid a root server runs a sandbox as (docs/design.md
// section 8, "One host uid per sandbox"). legacy: 65534, which every sandbox
// of a catalog from before schema version 3 ran as; kept while its files exist.
struct HostIds {
  unsigned uid = 0;
  unsigned gid = 0;
  bool legacy = false;
};
inline constexpr unsigned kLegacySandboxId = 65534;

// A stopped sandbox's workspace kept ready on disk (docs/design.md section 9,
// "Warm restore"): its live storage parked as it was when `snapshot` was
// taken, so a restore of that snapshot starts on it without extracting. The
// row exists only while the parked storage holds exactly that snapshot.
struct WarmRecord {
  std::string sandbox;
  std::string snapshot;
  std::uint64_t bytes = 0;  // what the parked storage takes on the state filesystem
  std::string stamp;        // the driver's check that it is unchanged since it was parked
  std::string cached_at;    // when it was parked: least recently used goes first
};

// The network policy a sandbox runs under (`--network proxy`; docs/network.md,
// "The policy in force"). The catalog keeps text only: network/ reads it.
struct NetworkPolicyRecord {
  std::string sandbox;
  std::string key;     // whose `conversations` entry of the policy file applies
  std::string policy;  // the policy as last applied (JSON, secrets by variable name only)
  std::string applied_at;
};

// An exposed port (docs/design.md section 12): the conversation's port
// inside its box, reached at http://address:host_port on the host.
struct ExposedPortRecord {
  std::string conversation;
  int port = 0;
  int host_port = 0;
  std::string address;
  std::string created_at;
};

// A code context the host keeps (docs/design.md section 12), by its
// sandbox's id, which stays the same over teardown and restore.
struct CodeContextRecord {
  std::string sandbox;
  std::string id;
  std::string language;  // python, javascript or bash
  std::string created_at;
  std::int64_t cells = 0;  // successful cells kept for replay
};

// Host ids reserved for sandboxes: uids uid_start.., gids gid_start.., count of each.
struct IdRange {
  std::uint32_t uid_start = 0;
  std::uint32_t gid_start = 0;
  std::uint32_t count = 0;
};

// ISO 8601 UTC with milliseconds, as every row stores times.
std::string iso_now();
std::string iso_time(std::int64_t seconds, long nanoseconds);

class Catalog {
 public:
  static constexpr int kSchemaVersion = 9;

  explicit Catalog(const std::filesystem::path& file);
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  int schema_version();
  const std::filesystem::path& file() const { return file_; }

  // The conversation's sandbox, created with new_id() when it has none. Safe
  // against another server doing the same at once: both get the same row.
  SandboxRecord sandbox_for(const std::string& conversation, const std::function<std::string()>& new_id);
  std::optional<SandboxRecord> find_by_conversation(const std::string& conversation);
  std::optional<SandboxRecord> find_sandbox(const std::string& id);
  std::vector<SandboxRecord> sandboxes();
  void set_state(const std::string& sandbox, SandboxState state, const std::string& restore_snapshot = "");
  // Writes back the state and restore target `before` was read with (the
  // stored text of a state this build does not know included).
  void put_back_state(const SandboxRecord& before);
  void set_owner(const std::string& sandbox, std::int64_t pid);
  void set_lost_processes(const std::string& sandbox, const std::string& json_array);
  // Deletes the sandbox, its conversation mapping, sessions and host ids
  // (snapshot rows are removed by the caller, who also deletes their files;
  // call it once its directories are gone).
  void remove_sandbox(const std::string& sandbox);
  // Step one of a destroy (docs/persistence.md, "Destroy"), one transaction:
  // sessions and lost processes cleared, state "destroying" (the conversation
  // mapping dropped, so its next call gets a fresh sandbox) or, keeping the
  // snapshots, "clearing" (mapping kept). Step three: drop_destroyed.
  void begin_destroy(const std::string& sandbox, bool keep_snapshots);
  // The sandbox row and every snapshot row of a "destroying" sandbox.
  void drop_destroyed(const std::string& sandbox);
  // Recovery's rebuild: a sandbox found on disk, mapped to conversation
  // when that is not empty and not taken by another sandbox.
  void adopt_sandbox(const std::string& sandbox, const std::string& conversation, SandboxState state);

  // Why the catalog file cannot be used (empty when it can or does not
  // exist): zero length, not SQLite, failing PRAGMA quick_check, or not
  // agentbox's schema. A newer schema is not damage (the constructor refuses it).
  static std::string damage(const std::filesystem::path& file);

  // The sandbox's host ids. When it has none (or legacy ones and
  // replace_legacy: its files are gone), the lowest pair of the range no
  // sandbox id holds, recorded in one IMMEDIATE transaction so that two
  // servers never pick the same. The sandbox id need not have a row yet (a
  // spare). Released by remove_sandbox or release_host_ids only. Throws
  // CatalogError when the range is full.
  HostIds host_ids(const std::string& sandbox, const IdRange& range, bool replace_legacy);
  std::optional<HostIds> find_host_ids(const std::string& sandbox);
  // Records ids not from the range (legacy) when the sandbox has none: what
  // `agentbox snapshot restore` unpacked as, kept while those files exist.
  void keep_host_ids(const std::string& sandbox, unsigned uid, unsigned gid);
  // For a sandbox id that never got a row (a spare whose directories are gone).
  void release_host_ids(const std::string& sandbox);

  void save_sessions(const std::string& sandbox, const std::vector<SessionRecord>& sessions);
  std::vector<SessionRecord> sessions(const std::string& sandbox);

  void add_snapshot(const SnapshotRecord& snapshot);
  void mark_complete(const std::string& snapshot);
  // Before a snapshot's file is deleted: a crash after it leaves a row
  // recovery drops, never a complete row without its file (which recovery
  // keeps and reports as lost).
  void mark_removing(const std::string& snapshot);
  // Newest first; all sandboxes when sandbox is empty. Incomplete rows only
  // when asked (recovery).
  std::vector<SnapshotRecord> snapshots(const std::string& sandbox, bool include_incomplete = false);
  std::optional<SnapshotRecord> find_snapshot(const std::string& id);
  std::optional<SnapshotRecord> latest_snapshot(const std::string& sandbox);
  void remove_snapshot(const std::string& id);

  // Incremental snapshots' links (catalog_chain.cpp). chain: the snapshots
  // a restore of `snapshot` extracts, oldest (a full archive) first, ending
  // with it; throws CatalogError naming a missing or incomplete link (or a
  // cycle). children: complete or not, of any sandbox. replace_archive: a
  // merge's result for `snapshot` (its file, digest, size and new parent)
  // in one statement.
  std::vector<SnapshotRecord> chain(const SnapshotRecord& snapshot);
  std::vector<SnapshotRecord> children(const std::string& snapshot);
  void replace_archive(const SnapshotRecord& merged);

  // The warm cache's rows (catalog_warm.cpp). set_warm replaces the
  // sandbox's row; take_warm removes it and returns what it was (the parked
  // storage is then the caller's to use or drop: a crash after it leaves
  // storage no row claims, which recovery drops). Oldest first.
  void set_warm(const WarmRecord& warm);
  std::optional<WarmRecord> find_warm(const std::string& sandbox);
  std::optional<WarmRecord> take_warm(const std::string& sandbox);
  std::vector<WarmRecord> warm_records();

  // A fork (catalog_fork.cpp, docs/design.md section 9): in one transaction
  // a new sandbox `snapshot.sandbox` for `conversation`, Stopped with
  // `snapshot` (a complete row, its file already in place) as what its
  // first start restores, and these sessions. False, changing nothing, when
  // the conversation already has a sandbox.
  bool add_fork(const std::string& conversation, const SnapshotRecord& snapshot,
                const std::vector<SessionRecord>& sessions);
  // A fork made by cloning the source's live storage (docs/design.md
  // section 9, "Fork"): sandbox `sandbox` "active" with no snapshot (its
  // live directories are the truth, adopted by its first call), the
  // conversation and the sessions, in one transaction; false (nothing
  // written) when the conversation already has a sandbox.
  bool add_clone(const std::string& conversation, const std::string& sandbox,
                 const std::vector<SessionRecord>& sessions);

  // The network policy rows (catalog_network.cpp). set_network_policy
  // replaces the sandbox's row; inherit_network_policy gives `to` the key
  // and policy of `from` (a fork runs under its source's), nothing when
  // `from` has none. The rows go with their sandbox's.
  std::optional<NetworkPolicyRecord> network_policy(const std::string& sandbox);
  void set_network_policy(const std::string& sandbox, const std::string& key, const std::string& policy);
  void inherit_network_policy(const std::string& from, const std::string& to);

  // Exposed ports (catalog_ports.cpp), by conversation; all of them when
  // `conversation` is empty, ordered by conversation and port. add replaces
  // the conversation's row for the port; CatalogError when another row has
  // the host port.
  void add_exposed_port(const ExposedPortRecord& record);
  bool remove_exposed_port(const std::string& conversation, int port);
  std::vector<ExposedPortRecord> exposed_ports(const std::string& conversation);
  // Code contexts and their successful cells (catalog_code.cpp). Dropped
  // with the sandbox (remove_sandbox, begin_destroy).
  static constexpr std::int64_t kMaxCodeCells = 1'000;        // per context
  static constexpr std::int64_t kMaxCodeBytes = 1 << 20;      // of code, per context
  static constexpr std::int64_t kMaxCodeContexts = 16;        // per sandbox, as the agent runs
  // False when the sandbox has kMaxCodeContexts already; true when added or already there.
  bool add_code_context(const CodeContextRecord& context);
  std::vector<CodeContextRecord> code_contexts(const std::string& sandbox);
  std::optional<CodeContextRecord> find_code_context(const std::string& sandbox, const std::string& id);
  // Appends a successful cell; false (nothing kept) when the context holds
  // kMaxCodeCells or its code would pass kMaxCodeBytes.
  bool add_code_cell(const std::string& sandbox, const std::string& id, const std::string& code);
  std::vector<std::string> code_cells(const std::string& sandbox, const std::string& id);
  bool remove_code_context(const std::string& sandbox, const std::string& id);

  // The snapshot store (catalog_store.cpp, s3_store.h). add_imported: in one
  // transaction a sandbox brought from the store for `conversation`, Stopped
  // (its first call restores the latest of `snapshots`, complete rows whose
  // files are in place) or None (destroyed keeping its snapshots), and its sessions; false (nothing written) when the
  // conversation or the sandbox id exists already. Erasures: destroyed
  // conversations whose copies in the store are still to be deleted.
  bool add_imported(const std::string& conversation, const std::string& sandbox, SandboxState state,
                    const std::vector<SnapshotRecord>& snapshots, const std::vector<SessionRecord>& sessions);
  void add_store_erasure(const std::string& conversation, const std::string& sandbox);
  std::vector<std::pair<std::string, std::string>> store_erasures();  // (conversation, sandbox)
  void remove_store_erasure(const std::string& conversation, const std::string& sandbox);

 private:
  void drop_code_contexts(const std::string& sandbox);  // inside a transaction
  void migrate();
  void exec(const char* sql);
  template <typename Fn>
  auto transaction(Fn&& fn) -> decltype(fn());

  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  std::recursive_mutex mutex_;  // one connection, used by many tool threads
};

}  // namespace agentbox::persistence
