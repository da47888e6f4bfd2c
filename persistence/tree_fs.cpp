#include "persistence/tree_fs.h"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <set>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

std::error_code errno_code(int err) { return {err, std::generic_category()}; }

// A directory stream owning its descriptor.
struct Dir {
  DIR* dir = nullptr;
  explicit Dir(int fd) : dir(fdopendir(fd)) {
    if (!dir) close(fd);
  }
  ~Dir() {
    if (dir) closedir(dir);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  int fd() const { return dirfd(dir); }
};

bool dot(const char* name) { return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])); }

// The parent of `path` by path (the server's own directory) and the last
// component's name.
std::pair<int, std::string> open_parent(const fs::path& path) {
  fs::path parent = path.parent_path();
  if (parent.empty()) parent = ".";
  return {open(parent.c_str(), kDirFlags), path.filename().string()};
}

class Remover {
 public:
  explicit Remover(dev_t dev) : dev_(dev) {}

  // Removes `name` in `parent`, whatever it is at each moment: a name a box
  // flips between a directory and a symlink is opened O_NOFOLLOW (so only
  // ever a real directory is entered) or unlinked as what it is.
  void remove(int parent, const char* name, int depth) {
    // The top is retried more: each pass also takes the subtrees moved up to it.
    for (int attempt = 0; attempt < (depth == 0 ? 64 : 8); ++attempt) {
      int fd = openat(parent, name, kDirFlags | O_NOATIME);
      if (fd < 0 && errno == EPERM) fd = openat(parent, name, kDirFlags);  // O_NOATIME needs ownership
      if (fd < 0) {
        if (errno == ENOENT) return;
        if (errno != ELOOP && errno != ENOTDIR) return fail(errno);
        if (unlinkat(parent, name, 0) == 0 || errno == ENOENT) return;
        if (errno == EISDIR || errno == EPERM) continue;  // a directory again (EPERM: Linux's unlink of one)
        return fail(errno);
      }
      struct stat st;
      if (fstat(fd, &st) != 0 || st.st_dev != dev_) {
        close(fd);
        return fail(EXDEV);  // a mount point: not ours to empty
      }
      if (depth >= kMaxTreeDepth) {
        // Deeper than one descriptor per level allows: moved up to the top
        // (a rename inside the tree, between two descriptors) and taken by
        // the top's next pass.
        close(fd);
        std::string moved = ".agentbox-deep-" + std::to_string(++moved_);
        if (top_ >= 0 && renameat(parent, name, top_, moved.c_str()) == 0) return;
        return fail(errno);
      }
      if (depth == 0) top_ = fd;
      empty(fd, depth + 1);
      if (depth == 0) top_ = -1;
      if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return;
      if (errno != ENOTDIR && errno != ENOTEMPTY && errno != EEXIST) return fail(errno);
      // Swapped for something else, or refilled meanwhile: look again.
    }
    fail(EAGAIN);
  }

  std::error_code error() const { return error_; }

 private:
  // Removes every entry of the directory `fd` (takes the descriptor).
  void empty(int fd, int depth) {
    Dir dir(fd);
    if (!dir.dir) return fail(errno);
    while (dirent* e = readdir(dir.dir)) {
      if (dot(e->d_name)) continue;
      if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) {
        if (unlinkat(dir.fd(), e->d_name, 0) == 0 || errno == ENOENT) continue;
        if (errno != EISDIR && errno != EPERM) {
          fail(errno);
          continue;
        }
      }
      remove(dir.fd(), e->d_name, depth);
    }
  }

  void fail(int err) {
    if (!error_) error_ = errno_code(err);
  }

  dev_t dev_;
  int top_ = -1;  // the tree's own directory while it is being emptied
  unsigned long moved_ = 0;
  std::error_code error_;
};

class Counter {
 public:
  explicit Counter(dev_t dev) : dev_(dev) {}

  void walk(int fd, int depth) {
    Dir dir(fd);
    if (!dir.dir) return;
    while (dirent* e = readdir(dir.dir)) {
      if (dot(e->d_name)) continue;
      struct stat st;
      // The type readdir gave is not trusted: the name may have been
      // swapped since (docs/design.md section 2).
      if (fstatat(dir.fd(), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev_) continue;
      if (st.st_nlink <= 1 || S_ISDIR(st.st_mode) || seen_.insert(st.st_ino).second)
        total_ += static_cast<std::uint64_t>(st.st_blocks) * 512;
      if (!S_ISDIR(st.st_mode) || depth >= kMaxTreeDepth) continue;
      int child = openat(dir.fd(), e->d_name, kDirFlags);
      if (child < 0) continue;  // swapped for a symlink or a file: not entered
      struct stat opened;
      if (fstat(child, &opened) != 0 || opened.st_dev != dev_ || opened.st_ino != st.st_ino) {
        close(child);
        continue;
      }
      walk(child, depth + 1);
    }
  }

  std::uint64_t total() const { return total_; }

 private:
  dev_t dev_;
  std::set<ino_t> seen_;
  std::uint64_t total_ = 0;
};

}  // namespace

int open_dir_beneath(int dirfd, const std::string& name) {
  open_how how{};
  how.flags = kDirFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof how);
  if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return static_cast<int>(fd);
  return openat(dirfd, name.c_str(), kDirFlags);
}

std::error_code remove_tree(const fs::path& path) {
  auto [parent, name] = open_parent(path);
  if (parent < 0) return errno == ENOENT ? std::error_code() : errno_code(errno);
  std::error_code result = remove_tree_at(parent, name);
  close(parent);
  return result;
}

std::error_code remove_tree_at(int parent, const std::string& name) {
  std::error_code result;
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    Remover remover(st.st_dev);
    remover.remove(parent, name.c_str(), 0);
    // An error on the way that a later pass made up for is no error.
    if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) result = remover.error();
  } else if (errno != ENOENT) {
    result = errno_code(errno);
  }
  return result;
}

std::uint64_t tree_disk_bytes(const fs::path& dir) {
  int fd = open(dir.c_str(), kDirFlags);
  if (fd < 0) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  Counter counter(st.st_dev);
  counter.walk(fd, 0);
  return counter.total();
}

}  // namespace agentbox::persistence
