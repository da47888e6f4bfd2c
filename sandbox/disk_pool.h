// Copy-on-write for the disks of a root server (docs/design.md section 9,
// "Fork"): a fork made now is a clone of the source's disk image (disk.h),
// blocks shared until either side writes them, so it costs the same for
// 1 GB as for 1 MB. That needs a filesystem under <state>/disks that can
// share blocks between files (FICLONE: btrfs, XFS with reflinks); ext4, the
// usual root filesystem, cannot. Where the state filesystem cannot, the
// disks live in a **pool**: one sparse file <state>/disks.pool holding a
// btrfs filesystem (nodatacow, discard=async: freed blocks go back to the
// state filesystem) mounted on <state>/disks through a loop device. It is
// made only where <state>/disks is new or empty (the images of an older
// agentbox stay where they are, and forks copy through a snapshot), mounted
// again by every start (after a reboot), and unmounted at shutdown by the
// last server on the state directory (lazily when an image still holds it)
// (servers sharing a state directory hold <state>/locks/disk-pool shared;
// the set-up and the last unmount take disk-pool.setup, one at a time).
#pragma once

#include <filesystem>
#include <string>

namespace agentbox::sandbox {

class DiskPool {
 public:
  // state_dir: the server's; create: serve --disk-pool auto (false: off).
  // Mounts an existing pool that is not mounted (throws SandboxError when it
  // cannot: the sandboxes' disks are in it), makes one when `create` allows
  // and the state filesystem cannot clone files, then probes whether files
  // in <state>/disks clone.
  DiskPool(const std::filesystem::path& state_dir, bool create);
  ~DiskPool();
  DiskPool(const DiskPool&) = delete;
  DiskPool& operator=(const DiskPool&) = delete;

  // Empty when the images in <state>/disks can be cloned; else why not.
  const std::string& clone_why() const { return clone_why_; }
  // How the images are stored (a pool, the state filesystem), for logs and doctor.
  const std::string& detail() const { return detail_; }
  bool pooled() const { return pooled_; }

 private:
  void make(const std::filesystem::path& pool) const;
  struct SetupLock {
    explicit SetupLock(const std::filesystem::path& state_dir);
    ~SetupLock();
    SetupLock(const SetupLock&) = delete;
    SetupLock& operator=(const SetupLock&) = delete;
    int fd_ = -1;
  };

  std::filesystem::path state_;
  std::filesystem::path dir_;  // <state>/disks
  int lock_fd_ = -1;
  bool pooled_ = false;
  std::string clone_why_;
  std::string detail_;
};

// A new file `to` sharing all of `from`'s blocks (FICLONE), synced unless
// `sync` is false (a fork syncs its clones once the source runs again:
// Disks::install). Throws SandboxError(INTERNAL) naming what failed; leaves
// no `to` behind.
void clone_file(const std::filesystem::path& from, const std::filesystem::path& to, bool sync = true);
// Writes a file's data and metadata to disk (fsync). Throws SandboxError(INTERNAL).
void sync_file(const std::filesystem::path& path);
// Writes everything of the filesystem holding `path` (syncfs) and, on ext4,
// checkpoints its journal, so that a freeze after it has little left to
// write and a clone little to replay. Best effort.
void flush_filesystem(const std::filesystem::path& path) noexcept;
// The same, for a clone: throws SandboxError(INTERNAL) when it fails.
void sync_filesystem(const std::filesystem::path& path);
// Empty when files in `dir` can be cloned (a trial pair of files); else why not.
std::string clone_probe(const std::filesystem::path& dir);

// Thaws a filesystem a server of an earlier version (which froze it with
// FIFREEZE to clone it) left frozen when it crashed; nothing if it is not.
void thaw_filesystem(const std::filesystem::path& mount_point) noexcept;

}  // namespace agentbox::sandbox
