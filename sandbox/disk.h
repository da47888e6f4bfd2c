// The workspace limit (docs/design.md sections 2, 4 and 8): as root, each
// sandbox's directory <state>/sandboxes/<id> is the mount point of its own
// ext4 filesystem, made in a sparse image file <state>/disks/<id>.img (root's,
// 0600) and mounted through a loop device (nosuid,nodev) in the server's own
// mount namespace. The kernel then enforces the bytes and the inodes of
// /workspace, /home/user, /tmp and the generated /etc together, every path
// below the sandbox directory stays what it was (snapshots read <id>/workspace,
// restores unpack into <id>/.restore-* and rename within one filesystem), and
// a bind of those directories into the box names the loop device and paths
// inside the image, never the state directory or the sandbox id.
//
// The mount outlives a crashed server (the data is in the image); the next
// server adopts it, or mounts an image that is not mounted (after a reboot)
// before recovery looks at the live directories. Unmounting and deleting the
// image is how live directories are discarded (idle teardown after the
// snapshot is recorded, destroy): size-independent. The box never gets the
// image file; only the kernel's ext4 driver writes it.
//
// Where that is impossible (a normal user, no /dev/loop-control, no
// mkfs.ext4, no CAP_SYS_ADMIN) sandboxes use plain directories on the state
// filesystem and the limit is not enforced: Disks::support() says why, and
// `serve` and `doctor` print it.
#pragma once

#include "persistence/recovery.h"

#include "sandbox/disk_pool.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

struct DiskOptions {
  std::uint64_t bytes = 10ull << 30;  // serve --workspace-limit; 0: plain directories
  std::uint64_t inodes = 0;           // serve --workspace-inodes; 0: one per 16 KiB of bytes
  bool pool = true;                   // serve --disk-pool auto|off (disk_pool.h)
  std::uint64_t inode_count() const;
};

// "64M", "10G", "1.5g", "4096" (bytes), "512k": binary units. Throws
// std::invalid_argument with a message naming the text.
std::uint64_t parse_size(const std::string& text);
// 10 GiB, 64 MiB, 4096 bytes: for messages.
std::string size_text(std::uint64_t bytes);

struct DiskSupport {
  bool enabled = false;
  std::string detail;  // how the limit is enforced, or why it is not
};

// What statvfs says of a sandbox directory that is its own filesystem.
struct DiskUsage {
  std::uint64_t used_bytes = 0;
  std::uint64_t capacity_bytes = 0;  // what files may take (the image minus ext4's metadata)
  std::uint64_t used_inodes = 0;
  std::uint64_t total_inodes = 0;
};

// When dir is a mount point (its own filesystem), its usage; else none.
std::optional<DiskUsage> disk_usage(const std::filesystem::path& dir);

class Disks {
 public:
  // state_dir: the server's; may_mount: root that may make mounts (the
  // manager's stages()). Probes once with a small image in state_dir/disks.
  Disks(const std::filesystem::path& state_dir, DiskOptions options, bool may_mount);

  const DiskSupport& support() const { return support_; }
  const DiskOptions& options() const { return options_; }
  std::filesystem::path image(const std::filesystem::path& sandbox_dir) const;

  // Makes sandbox_dir the mount of its image: mounts an existing image that
  // is not mounted, or creates one when the directory is new (absent, or
  // holding no more than a generated etc). A directory with plain live
  // directories of an older agentbox keeps them (false: not limited). The
  // caller holds the sandbox's lock. Throws SandboxError.
  bool ensure(const std::filesystem::path& sandbox_dir) const;
  // Unmounts the image (lazily: a straggler's open file does not block it)
  // and deletes it. False when the sandbox has no image.
  bool drop(const std::filesystem::path& sandbox_dir) const;
  // drop() that logs instead of throwing; true when there was an image.
  bool drop_quietly(const std::filesystem::path& sandbox_dir) const noexcept;
  // The warm cache (persistence/warm.h): park unmounts the image, waits
  // until no loop device backs it (the launchers drop their copies of it:
  // staging.h), renames it to <id>.warm (which nothing
  // mounts: not adopt_all, not ensure) and returns its stamp (inode, size,
  // mtime, blocks: any write through a loop device changes the mtime) and
  // the bytes it takes; unpark checks the stamp, renames it back and mounts
  // it, or says why not (then nothing of it is mounted or kept as the
  // image). Both throw nothing but SandboxError. drop() leaves a parked
  // image alone (recovery drops live storage of a sandbox whose warm copy
  // it keeps); whoever destroys a sandbox drops both.
  struct Parked {
    std::string stamp;
    std::uint64_t bytes = 0;
  };
  Parked park(const std::filesystem::path& sandbox_dir) const;
  std::string unpark(const std::filesystem::path& sandbox_dir, const std::string& stamp) const;
  std::filesystem::path parked_image(const std::filesystem::path& sandbox_dir) const;
  // Forks made now (docs/design.md section 9, "Fork"; disk_pool.h): empty
  // when images can be cloned, else why not. clone() writes out the mounted
  // filesystem of from_dir (syncfs; the caller holds its writers frozen:
  // one instant, crash-consistent) and clones its image once for each of
  // to_dirs as <id>.clone (unsynced: install() syncs it), which nothing mounts or
  // adopts (a start removes any a crash left); install() renames one to
  // <id>.img, a sandbox's disk like any other from then on; discard()
  // removes one. All throw SandboxError.
  std::string clone_why() const;
  // on_frozen (tests): called once the clones are made.
  void clone(const std::filesystem::path& from_dir, const std::vector<std::filesystem::path>& to_dirs,
             const std::function<void()>& on_frozen = {}) const;
  void install(const std::filesystem::path& sandbox_dir) const;
  void discard(const std::filesystem::path& sandbox_dir) const noexcept;
  // Shutdown, after unmount_idle: lets go of the disk pool (disk_pool.h).
  void release_pool() noexcept { pool_.reset(); }
  // Unmounts, keeping the image (shutdown); logs a failure.
  void unmount_quietly(const std::filesystem::path& sandbox_dir) const noexcept;
  // Mounts every image whose sandbox lock is free and that is not mounted
  // (a reboot); before recovery reads the live directories.
  void adopt_all(const std::filesystem::path& sandboxes_dir,
                 const std::function<std::filesystem::path(const std::string&)>& lock_path) const;
  // Unmounts every image whose lock is free (shutdown: adopt_all mounted
  // them all, the next start mounts them again); the images stay.
  void unmount_idle(const std::filesystem::path& sandboxes_dir,
                    const std::function<std::filesystem::path(const std::string&)>& lock_path) const;

 private:
  std::string probe(bool may_mount) const;  // empty when a trial image mounts; else why not
  void create(const std::filesystem::path& image, std::uint64_t bytes, std::uint64_t inodes) const;
  void mount_image(const std::filesystem::path& image, const std::filesystem::path& dir) const;

  std::filesystem::path clone_of(const std::filesystem::path& sandbox_dir) const;

  std::filesystem::path dir_;  // <state>/disks
  std::unique_ptr<DiskPool> pool_;  // as root, when images are made at all
  DiskOptions options_;
  DiskSupport support_;
  std::string mkfs_;
};

// The manager's start: probes, says at `serve` start whether the limit is
// enforced (a warning when not), and mounts what a crash or reboot left
// unmounted.
std::unique_ptr<Disks> start_disks(const DiskOptions& options, const persistence::StateLayout& layout, bool may_mount);
// Recovery discards a sandbox's live directories by dropping its image, and
// looks at warm copies where `parked` keeps them.
persistence::RecoveryHooks recovery_hooks(const Disks& disks, const persistence::StateLayout& layout,
                                          persistence::ParkedStorage* parked = nullptr);
// The agent's --workspace-limit value: the limit in bytes.
std::string limit_text(const Disks& disks);

}  // namespace agentbox::sandbox
