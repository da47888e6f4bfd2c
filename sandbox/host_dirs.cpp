#include "sandbox/host_dirs.h"

#include "os/errno_text.h"
#include "os/unique_fd.h"
#include "persistence/tree_fs.h"
#include "contract/errors.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;
using os::UniqueFd;

void make_state_subdir(const fs::path& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot create " + dir.string(), errno));
  chmod(dir.c_str(), mode);
}

namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw SandboxError(codes::kSandboxStartFailed, os::errno_text(what, err));
}

// <root>/name as an opened directory, made when missing. A symlink or a file
// there is refused: whoever put it there wants root to follow it.
UniqueFd child_dir(int root, const fs::path& root_path, const std::string& name) {
  fs::path path = root_path / name;
  if (mkdirat(root, name.c_str(), 0755) != 0 && errno != EEXIST) fail("cannot create " + path.string(), errno);
  UniqueFd fd(persistence::open_dir_beneath(root, name));
  if (fd) return fd;
  int err = errno;
  struct stat st;
  if (fstatat(root, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
    throw SandboxError(codes::kSandboxStartFailed,
                       path.string() + (S_ISLNK(st.st_mode) ? " is a symlink" : " is not a directory") +
                           ": the sandbox is not started on it (the server follows no link in a sandbox's "
                           "directories); remove it to start afresh");
  fail("cannot open " + path.string(), err);
}

void set_mode_owner(int fd, const fs::path& path, mode_t mode, std::optional<std::pair<unsigned, unsigned>> owner) {
  if (fchmod(fd, mode) != 0) fail("chmod " + path.string(), errno);
  if (owner && fchown(fd, owner->first, owner->second) != 0) fail("chown " + path.string(), errno);
}

// Written under a temporary name and renamed over `name`: a hard link
// planted as `name` is replaced, not written through.
// True when `name` in dir is already a regular root-owned 0644 file holding
// exactly `content` (opened O_NOFOLLOW): then nothing is written, so a start
// on a full state filesystem still works (file_delete is how space is freed).
bool already_written(int dir, const std::string& name, const std::string& content) {
  UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_mode & 07777) != 0644 ||
      st.st_uid != geteuid() || static_cast<std::size_t>(st.st_size) != content.size())
    return false;
  std::string have(content.size(), '\0');
  for (std::size_t done = 0; done < have.size();) {
    ssize_t n = read(fd.get(), have.data() + done, have.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return have == content;
}

void write_at(int dir, const fs::path& dir_path, const std::string& name, const std::string& content) {
  if (already_written(dir, name, content)) return;
  std::string temp = "." + name + ".agentbox-new";
  unlinkat(dir, temp.c_str(), 0);
  UniqueFd fd(openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) fail("cannot write " + (dir_path / name).string(), errno);
  for (std::size_t done = 0; done < content.size();) {
    ssize_t n = write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + (dir_path / name).string(), n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (fchmod(fd.get(), 0644) != 0 || renameat(dir, temp.c_str(), dir, name.c_str()) != 0)
    fail("cannot write " + (dir_path / name).string(), errno);
}

}  // namespace

void prepare_sandbox_dirs(const SandboxDirs& d, const DirsSetup& setup) {
  // <root>'s parent is the server's own: the path up to it is trusted.
  if (mkdir(d.root.c_str(), setup.root_mode) != 0 && errno != EEXIST) fail("cannot create " + d.root.string(), errno);
  UniqueFd root(open(d.root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) fail("cannot open " + d.root.string(), errno);
  // <root> stays the server's: the sandbox user could otherwise swap its
  // entries (docs/sandbox.md "State directory anywhere"). One an older
  // agentbox gave the sandbox user is taken back.
  std::optional<std::pair<unsigned, unsigned>> server;
  if (setup.owner) server = std::make_pair(0u, 0u);
  set_mode_owner(root.get(), d.root, setup.root_mode, server);
  for (const char* name : {"workspace", "home", "tmp"}) {
    UniqueFd dir = child_dir(root.get(), d.root, name);
    set_mode_owner(dir.get(), d.root / name, std::string(name) == "tmp" ? 01777 : 0755, setup.owner);
  }
  UniqueFd etc = child_dir(root.get(), d.root, "etc");
  set_mode_owner(etc.get(), d.etc(), 0755, server);  // the generated /etc is root's
  for (const auto& [name, content] : setup.etc_files) write_at(etc.get(), d.etc(), name, content);
}

}  // namespace agentbox::sandbox
