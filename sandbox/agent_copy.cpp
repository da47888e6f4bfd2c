// The private copy of the agent that bwrap binds into each box (see
// private_agent_copy in bwrap_plan.h; docs/design.md section 8, "What the box
// sees of the host").
#include "sandbox/bwrap_plan.h"

#include "sandbox/errors.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

// A directory whose path says nothing of the host: /run (a tmpfs on most
// hosts) for root, the user's runtime directory (also a tmpfs) for a normal
// user, else the state directory, whose path a normal user's box sees anyway.
fs::path copy_dir(const fs::path& state_dir) {
  if (geteuid() == 0) {
    if (mkdir("/run/agentbox", 0755) == 0 || errno == EEXIST) return "/run/agentbox";
  } else if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    struct stat st;
    fs::path dir = fs::path(runtime) / "agentbox";
    if (stat(runtime, &st) == 0 && st.st_uid == geteuid() && (mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST))
      return dir;
  }
  fs::path dir = state_dir / "bin";
  mkdir(dir.c_str(), 0700);
  return dir;
}

// Copies of other agent builds that no server holds (a shared flock per
// user) are removed; a box already running keeps its bound inode.
void remove_unused(const fs::path& dir, const std::string& keep) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("agent-", 0) != 0 || name == keep) continue;
    int fd = openat(dirfd(d), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dirfd(d), name.c_str(), 0);
    close(fd);
  }
  closedir(d);
}

bool copy_into(int from, int to) {
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(from, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return false;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(to, buf + done, static_cast<std::size_t>(n - done));
      if (w <= 0) return false;
      done += w;
    }
  }
}

// The copy's fd, held with a shared flock, or -1 (errno set).
int open_or_make(const fs::path& dir, const std::string& name, int source) {
  fs::path path = dir / name;
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat held, named;
      // A remover may have unlinked it between open and flock: check it is still the one named.
      if (flock(fd, LOCK_SH) == 0 && fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 &&
          held.st_ino == named.st_ino && held.st_uid == geteuid())
        return fd;
      close(fd);
      continue;
    }
    fs::path tmp = dir / (".tmp-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()));
    fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
    if (fd < 0) return -1;
    lseek(source, 0, SEEK_SET);
    // Locked before it gets its name, so no remover sees it unheld.
    bool ok = flock(fd, LOCK_SH) == 0 && copy_into(source, fd) && fchmod(fd, 0755) == 0 &&
              rename(tmp.c_str(), path.c_str()) == 0;
    if (ok) {
      // Held read-only: exec of a file open for writing anywhere fails with
      // ETXTBSY. The writable fd keeps its lock until the read-only one has one.
      int held = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (held >= 0 && flock(held, LOCK_SH) == 0) {
        close(fd);
        return held;
      }
      if (held >= 0) close(held);
      ok = false;
    }
    int err = errno;
    unlink(tmp.c_str());
    close(fd);
    errno = err;
    return -1;
  }
  errno = EAGAIN;
  return -1;
}

}  // namespace

AgentCopy::AgentCopy(const fs::path& source, const fs::path& state_dir) : path_(source) {
  int src = open(source.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (src < 0 || fstat(src, &st) != 0) {
    if (src >= 0) close(src);
    return;  // the caller's open of the source reports it
  }
  // Named by the build (size, change time, inode), never by its path.
  char name[96];
  std::snprintf(name, sizeof name, "agent-%jx-%jx%09ld-%jx", static_cast<std::uintmax_t>(st.st_size),
                static_cast<std::uintmax_t>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec, static_cast<std::uintmax_t>(st.st_ino));
  fs::path dir = copy_dir(state_dir);
  remove_unused(dir, name);
  held_ = open_or_make(dir, name, src);
  close(src);
  if (held_ >= 0) path_ = dir / name;
  else spdlog::warn("cannot copy the agent into {} ({}): boxes bind {} itself, and their /proc/self/mountinfo shows that path",
                    dir.string(), std::strerror(errno), source.string());
}

AgentCopy::~AgentCopy() {
  if (held_ >= 0) close(held_);  // the flock goes with it; a later server removes the copy if unused
}

}  // namespace agentbox::sandbox
