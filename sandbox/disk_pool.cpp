#include "sandbox/disk_pool.h"

#include "contract/errors.h"
#include "os/errno_text.h"
#include "persistence/store.h"
#include "sandbox/disk.h"
#include "sandbox/loop_device.h"
#include "sandbox/run_capture.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include <optional>

#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kMinPoolBytes = 1ull << 30;
// nodatacow: a box's writes go in place (no copy of every block written
// through the loop device) except where a clone still shares the block.
constexpr const char* kPoolMountData = "nodatacow,discard=async";

std::string find_mkfs_btrfs() {
  for (const char* p : {"/usr/sbin/mkfs.btrfs", "/sbin/mkfs.btrfs", "/usr/bin/mkfs.btrfs"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

// Nothing in dir but what a probe or a crash leaves (.probe-*, *.clone).
bool holds_no_image(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(".probe-", 0) != 0 && name.rfind(".clone-probe-", 0) != 0) return false;
  }
  return true;
}

void mount_pool(const fs::path& pool, const fs::path& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot create " + dir.string(), errno));
  mount_file(pool, dir, "btrfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME, kPoolMountData);
  chmod(dir.c_str(), 0700);
}

}  // namespace

DiskPool::SetupLock::SetupLock(const fs::path& state_dir) {
  fs::path lock = state_dir / "locks" / "disk-pool.setup";
  fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0 || flock(fd_, LOCK_EX) != 0) {
    int err = errno;
    if (fd_ >= 0) close(fd_);
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot lock " + lock.string(), err));
  }
}

DiskPool::SetupLock::~SetupLock() { close(fd_); }

std::string clone_probe(const fs::path& dir) {
  fs::path from = dir / (".clone-probe-" + persistence::random_hex(8)), to = from.string() + ".b";
  int fd = open(from.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return os::errno_text("cannot write a trial file in " + dir.string(), errno);
  std::string block(65536, 'x');
  bool written = write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size());
  close(fd);
  std::string why;
  if (!written) {
    why = "cannot write a trial file in " + dir.string();
  } else {
    try {
      clone_file(from, to);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  unlink(to.c_str());
  unlink(from.c_str());
  return why;
}

void sync_file(const fs::path& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("cannot open " + path.string(), errno));
  int rc = fsync(fd), err = errno;
  close(fd);
  if (rc != 0) throw SandboxError(codes::kInternal, os::errno_text("cannot sync " + path.string(), err));
}

// EXT4_IOC_CHECKPOINT (Linux 5.13; not in Debian 12's headers): writes the
// journal's transactions to their places and empties it, writers going on.
constexpr unsigned long kExt4Checkpoint = _IOW('f', 43, std::uint32_t);

void flush_filesystem(const fs::path& path) noexcept {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  syncfs(fd);
  std::uint32_t flags = 0;
  ioctl(fd, kExt4Checkpoint, &flags);  // another filesystem or an older kernel: ENOTTY, nothing to do
  close(fd);
}

void sync_filesystem(const fs::path& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("cannot open " + path.string(), errno));
  int rc = syncfs(fd), err = errno;
  close(fd);
  if (rc != 0) throw SandboxError(codes::kInternal, os::errno_text("cannot write out the filesystem on " + path.string(), err));
}

void clone_file(const fs::path& from, const fs::path& to, bool sync) {
  int in = open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) throw SandboxError(codes::kInternal, os::errno_text("cannot open " + from.string(), errno));
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    throw SandboxError(codes::kInternal, os::errno_text("cannot create " + to.string(), err));
  }
  std::string failed;
  int err = 0;
  if (ioctl(out, FICLONE, in) != 0) {
    err = errno;
    failed = err == EOPNOTSUPP || err == EXDEV || err == EINVAL || err == ENOTTY
                 ? "the filesystem of " + to.parent_path().string() + " cannot share blocks between files"
                 : "cannot clone " + from.string();
  } else if (sync && fsync(out) != 0) {
    err = errno;
    failed = "cannot sync " + to.string();
  }
  close(out);
  close(in);
  if (!failed.empty()) {
    unlink(to.c_str());
    throw SandboxError(codes::kInternal, os::errno_text(failed, err));
  }
}

DiskPool::DiskPool(const fs::path& state_dir, bool create) : state_(state_dir), dir_(state_dir / "disks") {
  fs::path pool = state_dir / "disks.pool";
  fs::path lock = state_dir / "locks" / "disk-pool";
  mkdir(lock.parent_path().c_str(), 0700);  // `doctor` may come first
  // Set-up and the last unmount one at a time (disk-pool.setup, held for a
  // moment); each server holds disk-pool shared for its life.
  SetupLock setup(state_dir);
  lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || flock(lock_fd_, LOCK_SH) != 0)
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot lock " + lock.string(), errno));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir, ec))
    if (entry.path().filename().string().rfind("disks.pool.tmp-", 0) == 0) fs::remove(entry.path(), ec);
  if (is_mount_point(dir_)) {
    pooled_ = access(pool.c_str(), F_OK) == 0;
  } else if (access(pool.c_str(), F_OK) == 0) {
    try {
      mount_pool(pool, dir_);
    } catch (const std::exception& e) {
      close(lock_fd_);
      lock_fd_ = -1;
      throw SandboxError(codes::kSandboxStartFailed,
                         "the disk pool " + pool.string() + " holds the sandboxes' disk images and does not mount (" +
                             e.what() + "); agentbox does not start without it. Repair it (btrfs check) or move it "
                             "and " + dir_.string() + " aside to start over");
    }
    pooled_ = true;
  } else if (std::string native = clone_probe(state_dir); !native.empty() && create) {
    if (!fs::exists(dir_, ec) || holds_no_image(dir_)) {
      try {
        make(pool);
        mount_pool(pool, dir_);
        pooled_ = true;
        spdlog::info("made the disk pool {} (btrfs) on {}: the state filesystem cannot clone files ({})",
                     pool.string(), dir_.string(), native);
      } catch (const std::exception& e) {
        spdlog::warn("no disk pool: {}", e.what());
        fs::remove(pool, ec);
      }
    } else {
      clone_why_ = native + ", and " + dir_.string() + " already holds disk images, so no disk pool is made there";
    }
  }
  if (clone_why_.empty() && fs::exists(dir_, ec)) clone_why_ = clone_probe(dir_);
  if (clone_why_.empty() && !fs::exists(dir_, ec)) clone_why_ = clone_probe(state_dir);
  if (!create && !pooled_ && !clone_why_.empty()) clone_why_ += " (--disk-pool off)";
  detail_ = pooled_ ? "disk images in the pool " + pool.string() + " (btrfs on a loop device), cloned for forks"
            : clone_why_.empty() ? "disk images on the state filesystem, cloned for forks"
                                 : "disk images are not cloned for forks: " + clone_why_;
}

DiskPool::~DiskPool() {
  if (lock_fd_ < 0) return;
  // The last server out. The images it unmounted lazily let go of their
  // loop devices once the last box's mount namespace is gone: a busy pool is
  // given a second, then detached lazily (no other server uses it; it goes
  // once its images do, and a start before that finds its loop device still
  // attached and mounts that same device: loop_device.h mount_file).
  std::optional<SetupLock> setup;
  if (pooled_) setup.emplace(state_);
  if (pooled_ && flock(lock_fd_, LOCK_EX | LOCK_NB) == 0 && is_mount_point(dir_)) {
    bool done = false;
    for (int i = 0; i < 50 && !done; ++i) {
      done = umount2(dir_.c_str(), 0) == 0;
      if (!done && errno != EBUSY) break;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!done && umount2(dir_.c_str(), MNT_DETACH) != 0)
      spdlog::warn("{}", os::errno_text("the disk pool on " + dir_.string() + " stays mounted", errno));
  }
  close(lock_fd_);
}

void DiskPool::make(const fs::path& pool) const {
  std::string mkfs = find_mkfs_btrfs();
  if (mkfs.empty()) throw SandboxError(codes::kSandboxStartFailed, "mkfs.btrfs is not installed (apt install btrfs-progs)");
  struct statvfs s{};
  if (statvfs(state_.c_str(), &s) != 0)
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot measure " + state_.string(), errno));
  // As large as the state filesystem: sparse, it takes what is written.
  std::uint64_t bytes = std::max<std::uint64_t>(kMinPoolBytes, static_cast<std::uint64_t>(s.f_blocks) * s.f_frsize);
  fs::path temp = state_ / ("disks.pool.tmp-" + persistence::random_hex(8));
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot create " + temp.string(), errno));
  bool sized = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  close(fd);
  std::string out;
  int rc = sized ? run_capture({mkfs, "-q", "-f", "-K", "-m", "single", "-d", "single", temp.string()}, out) : -1;
  if (rc != 0 || rename(temp.c_str(), pool.c_str()) != 0) {
    unlink(temp.c_str());
    throw SandboxError(codes::kSandboxStartFailed,
                       sized ? "mkfs.btrfs " + temp.string() + " failed (" + std::to_string(rc) + "): " + out
                             : "cannot size " + temp.string());
  }
}

void thaw_filesystem(const fs::path& mount_point) noexcept {
  int fd = open(mount_point.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  if (ioctl(fd, FITHAW, 0) == 0) spdlog::warn("thawed {}: a crashed server had left it frozen", mount_point.string());
  close(fd);
}

}  // namespace agentbox::sandbox
