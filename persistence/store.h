// The state directory's layout and the snapshot store on top of the catalog
// and the archive module.
//
//   <state>/catalog.db                         the catalog (SQLite, WAL)
//   <state>/sandboxes/<id>/{workspace,home}    live directories
//   <state>/sandboxes/<id>/.restore-*          a restore being unpacked
//   <state>/sandboxes/.trash-*                 being deleted
//   <state>/snapshots/<id>/<snapshot>.tar.zst  archives (+ .tmp-* while written)
//   <state>/locks/<id>.lock                    who drives the sandbox (flock)
//
// Taking a snapshot: archive to a temporary file, fsync, record a pending
// catalog row, rename, mark the row complete, prune. A crash at any step
// leaves either no snapshot (temporary file, removed by recovery) or a
// complete one (recovery verifies and completes a pending row). What the
// catalog's state says around these steps is lifecycle.h.
#pragma once

#include "persistence/archive.h"
#include "persistence/catalog.h"

#include <filesystem>
#include <string>
#include <vector>

namespace agentbox::persistence {

struct StateLayout {
  std::filesystem::path root;

  std::filesystem::path catalog() const { return root / "catalog.db"; }
  std::filesystem::path sandboxes() const { return root / "sandboxes"; }
  std::filesystem::path sandbox(const std::string& id) const { return sandboxes() / id; }
  std::filesystem::path snapshots(const std::string& id) const { return root / "snapshots" / id; }
  std::filesystem::path lock(const std::string& id) const { return root / "locks" / (id + ".lock"); }
  // Which conversation a sandbox serves, written next to its snapshots when
  // the sandbox is created, so a catalog rebuilt from disk can map it back.
  std::filesystem::path conversation_file(const std::string& id) const { return snapshots(id) / "conversation"; }
  std::filesystem::path lost_and_found() const { return root / "lost+found"; }
  // The trees a snapshot holds, by their names in the archive.
  std::vector<ArchiveTree> trees(const std::string& id) const;
};

// Renames path out of the way into <sandboxes>/.trash-* and deletes it; a
// crash half-way leaves only trash, which recovery removes.
void discard_dir(const StateLayout& layout, const std::filesystem::path& path);

// Moves path to <state>/lost+found/<name>-<time> and returns where, for
// what recovery cannot account for and must not delete.
std::filesystem::path move_aside(const StateLayout& layout, const std::filesystem::path& path, const std::string& name);

// Writes conversation_file(id) (once; tmp + rename) unless it exists.
void record_conversation(const StateLayout& layout, const std::string& id, const std::string& conversation);

// True for an exception that says the disk (or quota) is full: SQLite's
// SQLITE_FULL, ENOSPC/EDQUOT from std::filesystem, or their strerror text.
bool disk_full(const std::exception& e);

class SnapshotStore {
 public:
  // `timeout` bounds every helper run of take() and restore() (`serve --snapshot-timeout`).
  SnapshotStore(StateLayout layout, Catalog& catalog, std::chrono::milliseconds timeout = kDefaultArchiveTimeout)
      : layout_(std::move(layout)), catalog_(catalog), timeout_(timeout) {}

  // Incremental snapshots (docs/design.md section 9): a snapshot holds only
  // what changed since the sandbox's live trees were last written or
  // restored, when that snapshot still exists and its chain is shorter than
  // this; 1 makes every snapshot complete.
  static constexpr std::size_t kDefaultMaxChain = 16;
  void set_max_chain(std::size_t n) { max_chain_ = n; }

  // Archives the sandbox's live directories (only what changed since the
  // baseline's snapshot, when incremental_parent names one). `reason`:
  // manual, idle, ...
  SnapshotRecord take(const std::string& sandbox, const std::string& label, const std::string& reason,
                      const ArchiveProgressFn& progress = {});

  // Unpacks the snapshot into a fresh staging directory under the sandbox's
  // directory and swaps each tree in by rename (the old trees are deleted
  // afterwards, off the live path). Throws ArchiveError, touching nothing
  // live, when the archive is missing, corrupt, malicious or its digest
  // does not match.
  ExtractResult restore(const SnapshotRecord& snapshot, std::optional<std::pair<unsigned, unsigned>> owner,
                        const ArchiveProgressFn& progress = {});

  // The archive of `source` as a snapshot of another sandbox (a fork): a
  // hard link (archives are never written again once renamed in), a copy
  // where the filesystem refuses one. Same digest, reason "fork"; no row is
  // written (Catalog::add_fork does). Throws on failure, leaving no file.
  SnapshotRecord share(const SnapshotRecord& source, const std::string& sandbox);

  // Deletes the file, then the row; first folds it into every snapshot that
  // holds its changes since it (merge on prune). Throws, removing nothing,
  // when a merge fails.
  void remove(const SnapshotRecord& snapshot);
  // `child` (whose parent is `parent`) rewritten to hold what it inherits
  // from it: its new archive, then its row, then its old file.
  void fold(const SnapshotRecord& parent, const SnapshotRecord& child);

  // The snapshot a new one of `sandbox` would hold the changes since; "" for complete.
  std::string incremental_parent(const std::string& sandbox);
  // The chain a restore of `snapshot` extracts; ArchiveError when it is broken.
  std::vector<Layer> layers_of(const SnapshotRecord& snapshot);
  // What restoring it reads: the bytes of its whole chain.
  std::uint64_t total_bytes(const SnapshotRecord& snapshot);
  // The live trees' file stamps (persistence/layers.h), host-side.
  std::filesystem::path baseline(const std::string& sandbox) const { return layout_.snapshots(sandbox) / "baseline"; }
  // Keeps the newest `keep` unlabelled snapshots and every labelled one;
  // returns what was removed.
  std::vector<SnapshotRecord> prune(const std::string& sandbox, std::size_t keep);

  std::filesystem::path file(const SnapshotRecord& snapshot) const { return layout_.root / snapshot.path; }
  const StateLayout& layout() const { return layout_; }

 private:
  StateLayout layout_;
  Catalog& catalog_;
  std::chrono::milliseconds timeout_;
  std::size_t max_chain_ = kDefaultMaxChain;
};

// A merge's archive is named <child id>.<hex>.merged.tar.zst; one the
// catalog does not name is a merge that never committed (recovery drops it).
inline constexpr const char* kMergedSuffix = ".merged.tar.zst";

std::string random_hex(std::size_t digits);

}  // namespace agentbox::persistence
