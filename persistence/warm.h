// The warm cache's storage (docs/design.md section 9, "Warm restore"): a
// stopped sandbox's workspace and home kept on disk, exactly as the idle
// snapshot holds them, so the next start of that snapshot needs no
// extraction. The catalog row (Catalog::set_warm, WarmRecord) says which
// snapshot parked storage holds; it is written only after the box is
// stopped and the snapshot recorded, and removed before anything can
// change the storage again (lifecycle.h), so a row never names storage
// that holds anything else. The archive stays the durable copy either way.
//
// Parking moves the live trees out of the live paths (nothing that reads
// <state>/sandboxes/<id>/workspace sees them) and records a stamp the
// driver can check cheaply before it trusts them again; a mismatch, a
// missing piece or a failure to bring them back drops them, and the start
// extracts the archive instead.
#pragma once

#include "persistence/catalog.h"
#include "persistence/store.h"

#include <string>

namespace agentbox::persistence {

class ParkedStorage {
 public:
  virtual ~ParkedStorage() = default;
  // Moves the sandbox's stopped live storage aside as the warm copy of
  // `snapshot` (the box's /tmp, which no snapshot holds, is dropped) and
  // returns the row to record. Throws when it cannot; what it moved is then
  // dropped by drop().
  virtual WarmRecord park(const std::string& sandbox, const SnapshotRecord& snapshot) = 0;
  // Moves the parked storage of `warm` back to the live paths; empty when
  // done, else why not (the caller drops it and extracts the archive).
  virtual std::string unpark(const WarmRecord& warm) = 0;
  // Whether the sandbox has parked storage (recovery, eviction).
  virtual bool parked(const std::string& sandbox) const = 0;
  // Drops the parked storage (never the live one), off the call's path
  // where it is a tree. Does not throw.
  virtual void drop(const std::string& sandbox) noexcept = 0;
};

// Plain directories: <state>/sandboxes/<id>/.warm/{workspace,home}. The
// stamp is the inode, mtime and ctime of .warm and of each tree in it
// (a rename or an entry added or removed at their top changes it); what
// is deeper is trusted to the state directory's permissions (the server's
// own, 0700) and to the catalog's ordering, not re-read.
class ParkedDirs : public ParkedStorage {
 public:
  explicit ParkedDirs(StateLayout layout) : layout_(std::move(layout)) {}
  WarmRecord park(const std::string& sandbox, const SnapshotRecord& snapshot) override;
  std::string unpark(const WarmRecord& warm) override;
  bool parked(const std::string& sandbox) const override;
  void drop(const std::string& sandbox) noexcept override;

  std::filesystem::path dir(const std::string& sandbox) const { return layout_.sandbox(sandbox) / ".warm"; }
  // The stamp of what is parked now; empty when nothing is.
  std::string stamp(const std::string& sandbox) const;

 private:
  StateLayout layout_;
};

}  // namespace agentbox::persistence
