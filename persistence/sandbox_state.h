// A sandbox's lifecycle state, in the design's vocabulary (docs/design.md
// section 8, "Vocabularies"). The catalog stores it as text, which says
// which copy of the workspace is the truth for recovery (catalog.h);
// sandbox_status and `agentbox sandbox list` show it. These functions are
// the one place where the enum meets that text: the stored words are part
// of the on-disk format (a state directory of any earlier version keeps
// working), so they never change.
#pragma once

#include <string>
#include <string_view>

namespace agentbox::persistence {

enum class SandboxState {
  None,          // a row with no live directories yet (or after a destroy that kept the snapshots)
  Starting,      // being started; shown only (older servers stored it; recovery still reads it)
  Active,        // stored: the live directories are the truth; shown: a server runs it
  Snapshotting,  // an idle teardown in progress: still the live directories
  Stopped,       // the latest complete snapshot (or the restore target) is the truth
  Restoring,     // a snapshot being swapped in: still the snapshot
  Destroying,    // a destroy's tombstone: recovery finishes it
  Clearing,      // a destroy that keeps the snapshots: recovery finishes it
  Failed,        // shown only: its agent died
  Unknown,       // stored text this build does not know (SandboxRecord::unknown_state has it)
};

// The word stored and shown for a state; "unknown" for Unknown.
std::string_view state_name(SandboxState state);
// Unknown for any text that is not one of state_name's words.
SandboxState parse_state(std::string_view text);

}  // namespace agentbox::persistence
