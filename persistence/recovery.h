// What a crash left, repaired on start (docs/design.md section 4). For each
// sandbox this server can lock (one another server drives is skipped):
//
// - snapshots/<id>/*.tmp-*: a half-written archive, never a snapshot: deleted.
// - a pending catalog row whose file exists: verified (digest) and completed;
//   whose file is missing: dropped. A complete row without its file: dropped,
//   with a warning. An archive file with no row: verified and adopted
//   (reason "recovered"), or moved aside as *.corrupt if it does not verify.
// - sandboxes/<id>/.restore-*: an unfinished restore: deleted (the snapshot
//   it came from is intact).
// - state "snapshotting" (a teardown cut short): the live directories are
//   still the truth: back to "active", adopted by the next call.
// - state "restoring" or "stopped" with live directories: the snapshot is the
//   truth; the leftovers are deleted ("restoring" becomes "stopped" and
//   keeps its target). "stopped" without any snapshot keeps its live
//   directories and becomes "active" (never delete the only copy).
// - sandboxes/.trash-* (and .trash-* inside a sandbox's own filesystem) and
//   directories with no catalog row: deleted (a sandbox's own filesystem
//   through RecoveryHooks::discard_live).
#pragma once

#include "persistence/store.h"

#include <functional>
#include <string>
#include <vector>

namespace agentbox::persistence {

struct RecoveryReport {
  std::vector<std::string> actions;  // one line per repair, for the log
  std::vector<std::string> skipped;  // sandboxes locked by another server
};

// What the layer above owns of a sandbox's live directories.
struct RecoveryHooks {
  // Discards the live directories of sandbox `id` wholesale (its own
  // filesystem, sandbox/disk.h); false when it has none, and the trees are
  // discarded one by one.
  std::function<bool(const std::string& id)> discard_live;
};

RecoveryReport recover(const StateLayout& layout, Catalog& catalog, const RecoveryHooks& hooks = {});

}  // namespace agentbox::persistence
