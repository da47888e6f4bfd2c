#include "sandbox/disk.h"

#include "os/errno_text.h"
#include "persistence/sandbox_lock.h"
#include "persistence/store.h"
#include "contract/errors.h"
#include "sandbox/loop_device.h"
#include "sandbox/run_capture.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <thread>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdexcept>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>


namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kBytesPerInode = 16 * 1024;
constexpr std::uint64_t kMinBytes = 16ull << 20;  // ext4 with a journal needs a few MiB
constexpr std::uint64_t kProbeBytes = 16ull << 20;

SandboxError disk_error(const std::string& what, int err) {
  return SandboxError(codes::kSandboxStartFailed, os::errno_text(what, err));
}

std::string find_mkfs() {
  for (const char* p : {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/bin/mkfs.ext4"})
    if (access(p, X_OK) == 0) return p;
  return "";
}



}  // namespace

std::uint64_t DiskOptions::inode_count() const {
  return inodes ? inodes : std::max<std::uint64_t>(1024, bytes / kBytesPerInode);
}

std::uint64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + text + "' is not a size (e.g. 64M, 10G)");
  }
  std::string unit = text.substr(used);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && (unit.back() == 'i')) unit.pop_back();
  int shift = unit.empty() ? 0 : -1;
  const std::string units = "KMGT";
  if (unit.size() == 1) {
    auto pos = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (pos != std::string::npos) shift = 10 * static_cast<int>(pos + 1);
  }
  if (shift < 0 || !(value >= 0) || value * std::ldexp(1.0, shift) > 1e18)
    throw std::invalid_argument("'" + text + "' is not a size (e.g. 64M, 10G)");
  return static_cast<std::uint64_t>(std::llround(value * std::ldexp(1.0, shift)));
}

std::string size_text(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && i < 4) v /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.3g %s", v, units[i]);
  return buf;
}

std::optional<DiskUsage> disk_usage(const fs::path& dir) {
  if (!is_mount_point(dir)) return std::nullopt;
  struct statvfs s{};
  if (statvfs(dir.c_str(), &s) != 0) return std::nullopt;
  DiskUsage u;
  u.used_bytes = (s.f_blocks - s.f_bfree) * s.f_frsize;
  u.capacity_bytes = s.f_blocks * s.f_frsize;
  u.used_inodes = s.f_files - s.f_ffree;
  u.total_inodes = s.f_files;
  return u;
}

Disks::Disks(const fs::path& state_dir, DiskOptions options, bool may_mount)
    : dir_(state_dir / "disks"), options_(options), mkfs_(find_mkfs()) {
  if (options_.bytes != 0 && options_.bytes < kMinBytes)
    throw std::invalid_argument("--workspace-limit must be at least 16M (or 0)");
  // The pool first (disk_pool.h): the images live in it.
  if (options_.bytes != 0 && geteuid() == 0 && may_mount && access("/dev/loop-control", R_OK | W_OK) == 0)
    pool_ = std::make_unique<DiskPool>(state_dir, options_.pool);
  std::string why = probe(may_mount);
  if (why.empty())
    support_ = {true, "each sandbox has its own ext4 filesystem of " + size_text(options_.bytes) + " and " +
                          std::to_string(options_.inode_count()) + " inodes (a sparse image in " + dir_.string() +
                          " on a loop device) for /workspace, /home/user and /tmp together"};
  else
    support_ = {false, "the workspace limit (" + size_text(options_.bytes) + ") is not enforced: " + why +
                           "; sandboxes keep their files in plain directories on the state directory's filesystem"};
}

std::string Disks::probe(bool may_mount) const {
  if (options_.bytes == 0) return "--workspace-limit 0";
  if (geteuid() != 0) return "a normal user cannot mount a filesystem per sandbox";
  if (!may_mount) return "this root may not mount (no CAP_SYS_ADMIN)";
  if (access("/dev/loop-control", R_OK | W_OK) != 0)
    return "no usable /dev/loop-control (" + std::string(std::strerror(errno)) + ")";
  if (mkfs_.empty()) return "mkfs.ext4 is not installed (apt install e2fsprogs)";
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return os::errno_text("cannot create " + dir_.string(), errno);
  // A real one, end to end: a container may have the device but refuse the mount.
  fs::path mount_point = dir_ / (".probe-" + persistence::random_hex(8));
  fs::path image = mount_point.string() + ".img";
  std::string why;
  try {
    create(image, kProbeBytes, 1024);
    if (mkdir(mount_point.c_str(), 0700) != 0) throw disk_error("cannot create " + mount_point.string(), errno);
    mount_image(image, mount_point);
    umount2(mount_point.c_str(), MNT_DETACH);
  } catch (const std::exception& e) {
    why = std::string("a trial mount failed (") + e.what() + ")";
  }
  std::error_code ec;
  fs::remove(mount_point, ec);
  fs::remove(image, ec);
  return why;
}

fs::path Disks::image(const fs::path& sandbox_dir) const {
  return dir_ / (sandbox_dir.filename().string() + ".img");
}

void Disks::create(const fs::path& image, std::uint64_t bytes, std::uint64_t inodes) const {
  int fd = open(image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw disk_error("cannot create the disk image " + image.string(), errno);
  // Sparse: blocks are allocated as the box writes, at most the limit.
  bool sized = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  int err = errno;
  close(fd);
  std::string out;
  if (!sized) {
    unlink(image.c_str());
    throw disk_error("cannot size the disk image " + image.string(), err);
  }
  // 4 KiB blocks whatever the size (mke2fs picks 1 KiB under 512 MiB), no
  // reserved blocks, the inode table and journal written lazily (~4 MB of
  // real disk, ~50 ms for 10 GiB).
  int rc = run_capture({mkfs_, "-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-N", std::to_string(inodes),
                "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", image.string()},
               out);
  if (rc != 0) {
    unlink(image.c_str());
    throw SandboxError(codes::kSandboxStartFailed, "mkfs.ext4 " + image.string() + " failed (" + std::to_string(rc) +
                                                       "): " + out);
  }
}

void Disks::mount_image(const fs::path& image, const fs::path& dir) const {
  // nosuid,nodev: nothing on it gains privileges or reaches a device; exec
  // stays (the box runs its programs from /workspace).
  mount_file(image, dir, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "errors=remount-ro");
}

bool Disks::ensure(const fs::path& sandbox_dir) const {
  if (!support_.enabled) return false;
  if (is_mount_point(sandbox_dir)) return true;
  fs::path img = image(sandbox_dir);
  if (mkdir(sandbox_dir.c_str(), 0700) != 0 && errno != EEXIST) throw disk_error("cannot create " + sandbox_dir.string(), errno);
  bool exists = access(img.c_str(), F_OK) == 0;
  if (!exists) {
    // Never hide files under a mount: only a new directory gets an image
    // (an etc is regenerated at each start).
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(sandbox_dir, ec)) {
      if (entry.path().filename() != "etc") {
        spdlog::warn("sandbox {} keeps its plain directories from before the workspace limit: not limited",
                     sandbox_dir.filename().string());
        return false;
      }
    }
    fs::remove_all(sandbox_dir / "etc", ec);
    create(img, options_.bytes, options_.inode_count());
  }
  try {
    mount_image(img, sandbox_dir);
  } catch (...) {
    if (!exists) unlink(img.c_str());
    throw;
  }
  rmdir((sandbox_dir / "lost+found").c_str());  // e2fsck makes it again if it needs it
  return true;
}

bool Disks::drop(const fs::path& sandbox_dir) const {
  fs::path img = image(sandbox_dir);
  bool had = access(img.c_str(), F_OK) == 0;
  // Unmounted first: a crash in between leaves an image recovery mounts and drops again.
  while (is_mount_point(sandbox_dir)) {
    if (umount2(sandbox_dir.c_str(), MNT_DETACH) != 0)
      throw SandboxError(codes::kInternal, os::errno_text("cannot unmount " + sandbox_dir.string(), errno));
    had = true;
  }
  if (had && unlink(img.c_str()) != 0 && errno != ENOENT)
    throw SandboxError(codes::kInternal, os::errno_text("cannot delete " + img.string(), errno));
  return had;
}

fs::path Disks::parked_image(const fs::path& sandbox_dir) const {
  return dir_ / (sandbox_dir.filename().string() + ".warm");
}

namespace {

std::string image_stamp(const fs::path& file, std::uint64_t* blocks = nullptr) {
  struct stat st{};
  if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  if (blocks) *blocks = static_cast<std::uint64_t>(st.st_blocks) * 512;
  return "image " + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_blocks);
}

}  // namespace

Disks::Parked Disks::park(const fs::path& sandbox_dir) const {
  fs::path img = image(sandbox_dir), parked = parked_image(sandbox_dir);
  while (is_mount_point(sandbox_dir))
    if (umount2(sandbox_dir.c_str(), MNT_DETACH) != 0)
      throw SandboxError(codes::kInternal, os::errno_text("cannot unmount " + sandbox_dir.string(), errno));
  // Until the loop device lets go, the kernel may still write the image.
  for (int i = 0; !attached_loop(img).empty(); ++i) {
    if (i == 200) throw SandboxError(codes::kInternal, img.string() + " is still attached to a loop device after 2 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (rename(img.c_str(), parked.c_str()) != 0)
    throw SandboxError(codes::kInternal, os::errno_text("cannot park " + img.string(), errno));
  Parked out;
  out.stamp = image_stamp(parked, &out.bytes);
  return out;
}

std::string Disks::unpark(const fs::path& sandbox_dir, const std::string& stamp) const {
  fs::path img = image(sandbox_dir), parked = parked_image(sandbox_dir);
  std::string now = image_stamp(parked);
  if (now.empty()) return "its cached disk image is gone";
  if (now != stamp) return "its cached disk image changed after it was cached";
  if (is_mount_point(sandbox_dir) || access(img.c_str(), F_OK) == 0)
    return "a live disk image is in the way of its cached one";
  if (rename(parked.c_str(), img.c_str()) != 0) return os::errno_text("cannot move its cached disk image back", errno);
  std::string why;
  try {
    ensure(sandbox_dir);
    struct stat st{};
    if (lstat((sandbox_dir / "workspace").c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      why = "its cached disk image holds no workspace";
  } catch (const std::exception& e) {
    why = std::string("its cached disk image does not mount: ") + e.what();
  }
  if (!why.empty()) drop_quietly(sandbox_dir);
  return why;
}

std::string Disks::clone_why() const {
  if (!support_.enabled) return "sandboxes have no disk image to clone (" + support_.detail + ")";
  return pool_ ? pool_->clone_why() : "no disk pool";
}

fs::path Disks::clone_of(const fs::path& sandbox_dir) const {
  return dir_ / (sandbox_dir.filename().string() + ".clone");
}

void Disks::clone(const fs::path& from_dir, const std::vector<fs::path>& to_dirs,
                  const std::function<void()>& on_frozen) const {
  if (std::string why = clone_why(); !why.empty()) throw SandboxError(codes::kInternal, why);
  if (!is_mount_point(from_dir)) throw SandboxError(codes::kInternal, from_dir.string() + " is not its own filesystem");
  std::vector<fs::path> made;
  try {
    // Its writers are held by the caller (the box frozen): once written out,
    // the image is the filesystem at that instant, as a power cut would
    // leave it; its journal is replayed when the fork mounts it. FIFREEZE
    // would also checkpoint the journal: ~40 ms here, inside the freeze.
    sync_filesystem(from_dir);
    for (const auto& to : to_dirs) {
      clone_file(image(from_dir), clone_of(to), /*sync=*/false);  // install() syncs it, the source thawed
      made.push_back(to);
    }
    if (on_frozen) on_frozen();
  } catch (...) {
    for (const auto& to : made) discard(to);
    throw;
  }
}

void Disks::install(const fs::path& sandbox_dir) const {
  fs::path img = image(sandbox_dir);
  if (access(img.c_str(), F_OK) == 0)
    throw SandboxError(codes::kInternal, "a disk image is in the way of the fork's: " + img.string());
  sync_file(clone_of(sandbox_dir));  // on disk before a name recovery adopts points at it
  if (rename(clone_of(sandbox_dir).c_str(), img.c_str()) != 0)
    throw SandboxError(codes::kInternal, os::errno_text("cannot install the fork's disk image " + img.string(), errno));
}

void Disks::discard(const fs::path& sandbox_dir) const noexcept { unlink(clone_of(sandbox_dir).c_str()); }

void Disks::adopt_all(const fs::path& sandboxes_dir, const std::function<fs::path(const std::string&)>& lock_path) const {
  if (!support_.enabled) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(".probe-", 0) == 0) {  // a probe a crash left
      umount2(entry.path().c_str(), MNT_DETACH);
      fs::remove(entry.path(), ec);
      continue;
    }
    if (name.ends_with(".clone")) {  // a fork a crash cut short before its image was installed
      fs::remove(entry.path(), ec);
      continue;
    }
    if (name.size() <= 4 || !name.ends_with(".img")) continue;
    std::string id = name.substr(0, name.size() - 4);
    persistence::SandboxLock lock;
    try {
      if (!persistence::SandboxLock::acquire(lock_path(id), std::chrono::milliseconds(0), lock)) continue;
      if (is_mount_point(sandboxes_dir / id)) thaw_filesystem(sandboxes_dir / id);  // a fork cut short
      if (ensure(sandboxes_dir / id)) spdlog::debug("sandbox {}: its disk image is mounted", id);
    } catch (const std::exception& e) {
      spdlog::error("sandbox {}: cannot mount its disk image: {}", id, e.what());
    }
  }
}

void Disks::unmount_idle(const fs::path& sandboxes_dir,
                         const std::function<fs::path(const std::string&)>& lock_path) const {
  if (!support_.enabled) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() <= 4 || !name.ends_with(".img") || name[0] == '.') continue;
    std::string id = name.substr(0, name.size() - 4);
    persistence::SandboxLock lock;
    try {
      if (persistence::SandboxLock::acquire(lock_path(id), std::chrono::milliseconds(0), lock))
        unmount_quietly(sandboxes_dir / id);
    } catch (const std::exception& e) {
      spdlog::warn("sandbox {}: {}", id, e.what());
    }
  }
}

bool Disks::drop_quietly(const fs::path& sandbox_dir) const noexcept {
  try {
    return drop(sandbox_dir);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return true;  // recovery drops it at the next start
  }
}

void Disks::unmount_quietly(const fs::path& sandbox_dir) const noexcept {
  if (is_mount_point(sandbox_dir) && umount2(sandbox_dir.c_str(), MNT_DETACH) != 0)
    spdlog::warn("{}", os::errno_text("cannot unmount " + sandbox_dir.string(), errno));
}

std::unique_ptr<Disks> start_disks(const DiskOptions& options, const persistence::StateLayout& layout, bool may_mount) {
  auto disks = std::make_unique<Disks>(layout.root, options, may_mount);
  if (disks->support().enabled) spdlog::info("workspace limit: {}", disks->support().detail);
  else spdlog::warn("{}", disks->support().detail);
  if (disks->support().enabled) spdlog::info("forks: {}", disks->clone_why().empty() ? "cloned (copy-on-write)" : disks->clone_why());
  disks->adopt_all(layout.sandboxes(), [&layout](const std::string& id) { return layout.lock(id); });
  return disks;
}

persistence::RecoveryHooks recovery_hooks(const Disks& disks, const persistence::StateLayout& layout,
                                          persistence::ParkedStorage* parked) {
  persistence::RecoveryHooks hooks;
  hooks.parked = parked;
  hooks.discard_live = [&disks, &layout](const std::string& id) { return disks.drop(layout.sandbox(id)); };
  return hooks;
}

std::string limit_text(const Disks& disks) { return std::to_string(disks.options().bytes); }

}  // namespace agentbox::sandbox
