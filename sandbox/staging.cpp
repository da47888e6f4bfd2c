#include "sandbox/staging.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
struct mount_attr {
  __u64 attr_set;
  __u64 attr_clr;
  __u64 propagation;
  __u64 userns_fd;
};
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

namespace agentbox::sandbox {

namespace {

// "agentbox: cannot <what> <path><more>: <reason>\n" to fd, without allocating.
bool fail(int fd, const char* what, const char* path, const char* more = "") {
  const char* reason = strerrordesc_np(errno);
  for (const char* part : {"agentbox: cannot ", what, " ", path, more, ": ", reason ? reason : "error", "\n"})
    (void)!write(fd, part, std::strlen(part));
  return false;
}

// Bind-mounts what fd is on target (created as a directory or an empty file).
// open_tree(OPEN_TREE_CLONE) clones the fd's own mount, so nothing is looked
// up by path again; the fd must have been opened in this mount namespace.
// idmap_fd: a user namespace whose mapping the new mount applies to file
// owners (MOUNT_ATTR_IDMAP); -1: none.
bool bind_fd(int fd, const char* target, bool directory, int err_fd, int idmap_fd = -1) {
  bool made;
  if (directory) {
    made = mkdir(target, 0755) == 0;
  } else {
    int file = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    made = file >= 0 && close(file) == 0;
  }
  if (!made) return fail(err_fd, "create", target);
  int tree = static_cast<int>(syscall(SYS_open_tree, fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH | O_CLOEXEC));
  if (tree < 0) return fail(err_fd, "clone the mount for", target);
  if (idmap_fd >= 0) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<__u64>(idmap_fd);
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
      int err = errno;
      close(tree);
      errno = err;
      return fail(err_fd, "map the owners of", target);
    }
  }
  bool ok = syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) == 0;
  int err = errno;
  close(tree);
  errno = err;
  return ok || fail(err_fd, "mount", target);
}

// The mount points strictly under `dir` in this mount namespace
// (/proc/self/mountinfo's fifth field, octal escapes undone).
std::vector<std::string> mounts_under(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line, prefix = dir + "/";
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string field, point;
    for (int i = 0; i < 5 && fields >> field; ++i) point = field;
    std::string path;
    for (std::size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        path += static_cast<char>(std::strtol(point.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        path += point[i];
      }
    }
    if (path.rfind(prefix, 0) == 0) out.push_back(path);
  }
  return out;
}

}  // namespace

Staging::Staging(std::filesystem::path sandbox_root, std::filesystem::path agent, std::filesystem::path mount_point)
    : root_(sandbox_root.string()), agent_(agent.string()), mount_point_(mount_point.string()) {
  for (std::size_t i = 0; i < kDirs; ++i) {
    targets_[i] = (mount_point / kStagedDirs[i]).string();
    names_[i] = std::string("/") + kStagedDirs[i];
  }
  targets_[kDirs] = (mount_point / kStagedAgent).string();
  // <state>/sandboxes/* and the disk pool on <state>/disks (disk_pool.h).
  sandbox_mounts_ = mounts_under(sandbox_root.parent_path().parent_path().string());
}

bool Staging::enter(int err_fd) const noexcept {
  if (unshare(CLONE_NEWNS) != 0) return fail(err_fd, "make a mount namespace for", root_.c_str());
  // A slave of the host's: host mounts still show, none of ours goes back.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return fail(err_fd, "make private", "/");
  if (mkdir(mount_point_.c_str(), 0755) != 0 && errno != EEXIST) return fail(err_fd, "create", mount_point_.c_str());
  if (mount("agentbox-staging", mount_point_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0)
    return fail(err_fd, "mount a tmpfs on", mount_point_.c_str());
  // dirs.root's parents are the server's own; below it nothing is followed.
  int root = open(root_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) return fail(err_fd, "open", root_.c_str());
  for (std::size_t i = 0; i < kDirs; ++i) {
    int fd = openat(root, kStagedDirs[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st{};
    bool etc = std::strcmp(kStagedDirs[i], "etc") == 0;
    // The generated /etc is root's: one the sandbox user made is refused.
    if (fd >= 0 && etc && (fstat(fd, &st) != 0 || st.st_uid != 0)) {
      close(fd);
      fd = -1;
      errno = EPERM;
    }
    if (fd < 0) {
      int err = errno;
      close(root);
      errno = err;
      // ELOOP/ENOTDIR: a symlink or a file where the directory should be.
      return fail(err_fd, "open", root_.c_str(), names_[i].c_str());
    }
    // The generated /etc is root's on every disk: never mapped.
    bool ok = bind_fd(fd, targets_[i].c_str(), true, err_fd, etc || !idmap_ ? -1 : idmap_->get());
    close(fd);
    if (!ok) {
      close(root);
      return false;
    }
  }
  close(root);
  int agent = open(agent_.c_str(), O_PATH | O_CLOEXEC);
  if (agent < 0) return fail(err_fd, "open the agent", agent_.c_str());
  bool ok = bind_fd(agent, targets_[kDirs].c_str(), false, err_fd);
  close(agent);
  // Every sandbox's filesystem (its own included, now that the staged
  // binds hold what this one needs) and the disk pool leave this namespace: a copy here
  // would keep another sandbox's image busy (its loop device attached) for
  // as long as this box lives, since the host's unmount does not propagate
  // (disk.h, "park").
  for (const auto& point : sandbox_mounts_) umount2(point.c_str(), MNT_DETACH);
  return ok;
}

}  // namespace agentbox::sandbox
