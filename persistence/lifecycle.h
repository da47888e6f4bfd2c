// The crash-ordered sequences of a sandbox's life (docs/persistence.md, "Idle
// teardown and restore", "Destroy"). Each one records in the catalog which
// copy of the workspace is the truth before the step that makes the other
// copy stale, so a SIGKILL between any two steps leaves a state recovery
// (recovery.h) repairs without losing a file:
//
//   teardown  Snapshotting → stop the box → take → Stopped → park the live
//             storage and record it warm (or discard it) → prune
//   restore   Restoring (target recorded) → take the warm row → unpark it,
//             or extract → swap; Active once the box runs on it (activate)
//   destroy   Destroying / Clearing tombstone → live trees and directory to
//             trash → archives → rows (Clearing: None)
//
// The server runs them (sandbox/manager_lifecycle.cpp) with its host-side
// steps as callbacks; tests/persistence/crash_test.cpp runs the same
// functions and kills them at each step. Nothing here knows a process.
#pragma once

#include "persistence/store.h"
#include "persistence/warm.h"

#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::persistence {

// What a sequence tells its caller besides its result. Both may be empty.
struct LifecycleHooks {
  // Called with a step's name once it is done (crash_test dies there).
  std::function<void(const char* step)> reached;
  // A step that failed without changing the outcome (the server logs it).
  std::function<void(const std::string& line)> warn;
};

struct Teardown {
  std::string sandbox;
  // Host side, once the catalog says Snapshotting: save what only the box
  // knows (sessions, running processes), then stop it, so nothing writes to
  // the workspace while it is archived. Its exceptions pass through, and the
  // catalog stays Snapshotting (which recovery reads as Active).
  std::function<void()> stop;
  // Takes the snapshot once the box is stopped (the driver's export: a
  // driver that keeps the workspace elsewhere copies it out first); empty:
  // store.take(sandbox, "", "idle").
  std::function<SnapshotRecord()> take;
  // The live directories discarded once the catalog says Stopped.
  std::vector<std::filesystem::path> live_dirs;
  // Drops them wholesale (the sandbox's own filesystem); false when it has
  // none, and live_dirs go one by one.
  std::function<bool()> discard_live;
  // Set: the live storage is parked as the warm copy of the snapshot just
  // taken instead of discarded (docs/design.md section 9, "Warm restore").
  // A failure to park or to record it discards, as without it.
  ParkedStorage* park = nullptr;
  std::size_t keep_snapshots = 5;
  LifecycleHooks hooks;
};

struct TeardownResult {
  // Set when the teardown gave up: the catalog is back at Active (as far as
  // it could be written) and the live directories stay the truth.
  std::exception_ptr error;
  bool stopped = false;  // whether the box was stopped before it gave up
  SnapshotRecord snapshot;
  std::optional<WarmRecord> warm;  // what was parked and recorded
  std::vector<SnapshotRecord> pruned;  // removed by retention (a failure there goes to warn)
};

TeardownResult tear_down(Catalog& catalog, SnapshotStore& store, const Teardown& teardown);

// The snapshot a start of a Stopped sandbox restores: its restore target,
// else its latest. None when the catalog no longer has it.
std::optional<SnapshotRecord> resume_target(Catalog& catalog, const SandboxRecord& record);

struct Restore {
  const SnapshotRecord* snapshot = nullptr;
  // Host side, once the catalog says Restoring: who the restored files
  // belong to (none: the caller). A throw fails the restore.
  std::function<std::optional<std::pair<unsigned, unsigned>>()> owner;
  // Extracts and swaps the snapshot in (the driver's import); empty:
  // store.restore(*snapshot, owner, progress).
  std::function<ExtractResult(std::optional<std::pair<unsigned, unsigned>> owner, const ArchiveProgressFn& progress)>
      extract;
  ArchiveProgressFn progress;
  // Stored when the restore fails (it touched nothing live): Stopped keeps
  // this snapshot as the target, any other state none.
  SandboxState on_failure = SandboxState::Stopped;
  // Set: a failure writes back this record's state and target instead
  // (Catalog::put_back_state), so a snapshot that failed to restore never
  // becomes the target the next start restores (sandbox_restore).
  const SandboxRecord* before = nullptr;
  // Set: a warm copy of this snapshot is used instead of the archive when
  // its row names it and it comes back; any other parked storage is dropped.
  ParkedStorage* warm = nullptr;
  LifecycleHooks hooks;
};

struct RestoreResult {
  ExtractResult extract;  // from the archive; from the warm copy: the snapshot's own counts
  bool warm = false;      // started on the warm copy, no extraction
  std::string cache_miss;  // a warm copy was there and could not be used: why
};

// Restoring (the snapshot recorded as the target) → the warm row taken →
// its storage back, or extract → swap. The catalog stays Restoring until
// activate(): a crash before then discards the restored trees and leaves
// Stopped on the same target (parked storage no row names is dropped by
// recovery). Throws what the store threw, after storing on_failure.
RestoreResult restore(Catalog& catalog, SnapshotStore& store, const Restore& restore);

// Active: the live directories are the truth (again). `before` is the state
// the start found. After a restore (Stopped or Restoring) a failure to
// record it throws, since a crash would discard what the box writes from
// now on; otherwise it goes to warn (the live directories are the truth
// either way).
void activate(Catalog& catalog, const std::string& sandbox, SandboxState before, const LifecycleHooks& hooks = {});

// Drops the live directories wholesale (the sandbox's own filesystem);
// false when it has none.
using DiscardLive = std::function<bool(const std::string& sandbox)>;

// Destroys the sandbox: the catalog records the destroy (Catalog::
// begin_destroy), then finish_destroy. A crash before the first step
// leaves the old sandbox, after it recovery finishes the destroy.
void destroy(Catalog& catalog, SnapshotStore& store, const std::string& sandbox, bool keep_snapshots,
             const DiscardLive& discard_live = {}, const LifecycleHooks& hooks = {});
// The rest of a destroy the catalog recorded: the live directories, then
// (unless Clearing) the archives, then the rows. Idempotent.
void finish_destroy(Catalog& catalog, SnapshotStore& store, const std::string& sandbox,
                    const DiscardLive& discard_live = {}, const LifecycleHooks& hooks = {});

}  // namespace agentbox::persistence
