#include "sandbox/disk_owner.h"

#include "contract/errors.h"
#include "os/errno_text.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <sched.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = ".disk-owner";

bool write_all(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

}  // namespace

std::optional<HostIds> read_disk_owner(const fs::path& sandbox_root) {
  int fd = open((sandbox_root / kMarker).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[64] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  unsigned uid = 0, gid = 0;
  if (n <= 0 || std::sscanf(buf, "%u:%u", &uid, &gid) != 2) return std::nullopt;
  return HostIds{uid, gid};
}

void write_disk_owner(const fs::path& sandbox_root, HostIds ids) {
  fs::path marker = sandbox_root / kMarker, temp = sandbox_root / ".disk-owner.tmp";
  unlink(temp.c_str());
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("cannot create " + temp.string(), errno));
  std::string text = std::to_string(ids.first) + ":" + std::to_string(ids.second) + "\n";
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok || rename(temp.c_str(), marker.c_str()) != 0) {
    if (ok) err = errno;
    unlink(temp.c_str());
    throw SandboxError(codes::kInternal, os::errno_text("cannot write " + marker.string(), err));
  }
}

os::UniqueFd idmap_userns(HostIds disk, HostIds box) {
  auto fail = [](const std::string& what, int err) {
    return SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot make the idmapped mounts' user namespace: " + what, err));
  };
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0) throw fail("pipe", errno);
  if (pipe2(hold, O_CLOEXEC) != 0) {
    int err = errno;
    close(ready[0]), close(ready[1]);
    throw fail("pipe", err);
  }
  pid_t pid = fork();
  if (pid == 0) {  // one thread, async-signal-safe calls only: a user namespace that waits
    close(ready[0]);
    close(hold[1]);
    char ok = unshare(CLONE_NEWUSER) == 0 ? '1' : '0';
    (void)!write(ready[1], &ok, 1);
    char c;
    (void)!read(hold[0], &c, 1);  // until the parent has its descriptor
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  int err = errno;
  char ok = '0';
  bool child = pid > 0 && read(ready[0], &ok, 1) == 1 && ok == '1';
  close(ready[0]);
  os::UniqueFd ns;
  std::string why = pid < 0 ? "fork" : !child ? "unshare" : "";
  if (child) {
    std::string proc = "/proc/" + std::to_string(pid);
    // On-disk ids are the namespace's "inside" ids, the box's its "outside" ones.
    if (!write_all(proc + "/uid_map", std::to_string(disk.first) + " " + std::to_string(box.first) + " 1\n"))
      why = "uid_map", err = errno;
    else if (!write_all(proc + "/gid_map", std::to_string(disk.second) + " " + std::to_string(box.second) + " 1\n"))
      why = "gid_map", err = errno;
    else if (ns = os::UniqueFd(open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC)); !ns)
      why = "open its ns/user", err = errno;
  }
  close(hold[1]);  // the child ends
  if (pid > 0) waitpid(pid, nullptr, 0);
  if (!why.empty()) throw fail(why, err);
  return ns;
}

}  // namespace agentbox::sandbox
