// What a crash left, repaired on start (docs/design.md section 4). For each
// sandbox this server can lock (one another server drives is skipped):
//
// - snapshots/<id>/*.tmp-*: a half-written archive, never a snapshot: deleted.
// - a pending catalog row whose file exists: verified (digest) and completed;
//   whose file is missing: dropped. A complete row without its file is kept
//   (the next restore of it reports SNAPSHOT_CORRUPT), with a warning. An archive file with no row: verified and adopted
//   (reason "recovered"), or moved aside as *.corrupt if it does not verify.
// - sandboxes/<id>/.restore-*: an unfinished restore: deleted (the snapshot
//   it came from is intact).
// - state "snapshotting" (a teardown cut short): the live directories are
//   still the truth: back to "active", adopted by the next call.
// - state "restoring" or "stopped" with live directories: the snapshot is the
//   truth; the leftovers are deleted ("restoring" becomes "stopped" and
//   keeps its target). When that snapshot's file is gone, "stopped" keeps
//   and adopts its live directories (a teardown stopped the agent before it
//   archived them), "restoring" moves them to lost+found. "stopped" without
//   any snapshot keeps its live directories and becomes "active".
// - a warm row (warm.h) is kept only for a "stopped" sandbox whose parked
//   storage is there and holds its restore target; otherwise the row and
//   the storage go (the archive is the truth). Parked storage no row names
//   is dropped. When the target's archive is gone, the warm copy is the best
//   copy there is: moved back and adopted ("active").
// - "destroying"/"clearing" (a destroy cut short): finished.
// - sandboxes/.trash-* (and .trash-* inside a sandbox's own filesystem):
//   deleted; a sandbox's own filesystem goes through RecoveryHooks::discard_live. A directory with no catalog row: adopted
//   when snapshots/<id>/conversation names an unmapped conversation, else
//   moved to <state>/lost+found (deleted only when it holds no file: a spare
//   a crash left). Recovery never deletes a workspace it cannot account for.
// - a damaged catalog (Catalog::damage) is renamed aside before it is
//   opened (set_aside_damaged_catalog) and rebuilt from the directories and
//   archives on disk (docs/persistence.md, "Crash safety and recovery").
#pragma once

#include "persistence/store.h"
#include "persistence/warm.h"

#include <functional>
#include <string>
#include <vector>

namespace agentbox::persistence {

struct RecoveryReport {
  std::vector<std::string> actions;  // one line per repair, for the log
  std::vector<std::string> skipped;  // sandboxes locked by another server
  std::vector<std::string> failed;   // repairs that could not be done (a full disk): retried next start
};

// What the layer above owns of a sandbox's live directories.
struct RecoveryHooks {
  // Discards the live directories of sandbox `id` wholesale (its own
  // filesystem, sandbox/disk.h); false when it has none, and the trees are
  // discarded one by one.
  std::function<bool(const std::string& id)> discard_live;
  // Where warm copies are parked (the driver's: a sandbox's own filesystem
  // is parked whole); none: plain directories (ParkedDirs).
  ParkedStorage* parked = nullptr;
};

// Renames a damaged catalog (and its -wal/-shm) to catalog.db.damaged-<time>
// and returns a sentence saying why and where it is kept; empty when the
// catalog is usable or absent.
std::string set_aside_damaged_catalog(const StateLayout& layout);

// rebuild: the catalog was just set aside, so sandboxes and archives found
// on disk are adopted even without a live workspace.
RecoveryReport recover(const StateLayout& layout, Catalog& catalog, bool rebuild = false,
                       const RecoveryHooks& hooks = {});

// What doctor shows: damaged catalogs kept and entries of lost+found.
std::vector<std::string> kept_aside(const StateLayout& layout);

}  // namespace agentbox::persistence
