#include "sandbox/freezer.h"

#include "contract/errors.h"
#include "os/errno_text.h"

#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

// The kernel's answer to a cgroup write is the write's errno.
std::string write_value(const fs::path& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return os::errno_text("open " + path.string(), errno);
  bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  int err = errno;
  close(fd);
  return ok ? "" : os::errno_text("write " + value + " to " + path.string(), err);
}

std::set<pid_t> read_pids(const fs::path& procs) {
  std::ifstream in(procs);
  std::set<pid_t> pids;
  pid_t pid;
  while (in >> pid) pids.insert(pid);
  return pids;
}

}  // namespace

bool thaw_left_frozen(const fs::path& group) {
  if (read_control_file(group / "freezer.state").rfind("FROZEN", 0) == 0 ||
      read_control_file(group / "freezer.state").rfind("FREEZING", 0) == 0)
    return write_value(group / "freezer.state", "THAWED").empty();
  if (read_control_file(group / "cgroup.freeze").rfind("1", 0) == 0)
    return write_value(group / "cgroup.freeze", "0").empty();
  return false;
}

namespace {

// Freezing takes effect once every task has stopped: the kernel says when.
bool wait_for(const std::function<bool()>& done) {
  for (int i = 0; i < 400; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace

fs::path v1_freezer_parent() {
  fs::path own = v1_controller_group("freezer");
  return own.empty() ? own : own / "agentbox";
}

Freezer::Freezer(const CgroupSupport& support, const Cgroup* group, std::string name)
    : support_(support), group_(group), name_(std::move(name)) {}

Freezer::~Freezer() {
  if (!v1_group_.empty()) rmdir(v1_group_.c_str());
}

std::string Freezer::unsupported() const {
  if (!group_ || group_->procs_files().empty())
    return "not supported here: the sandbox has no cgroup (" + support_.detail + ")";
  if (support_.version == CgroupSupport::Version::V2) {
    fs::path dir = fs::path(group_->procs_files().front()).parent_path();
    if (access((dir / "cgroup.freeze").c_str(), W_OK) != 0)
      return "not supported here: " + dir.string() + " has no writable cgroup.freeze (cgroup v2 freezing needs Linux 5.2)";
    return "";
  }
  if (v1_freezer_parent().empty()) return "not supported here: cgroup v1 without a freezer hierarchy mounted";
  return "";
}

FreezeResult Freezer::freeze() { return set(true); }
FreezeResult Freezer::thaw() { return set(false); }

FreezeResult Freezer::set(bool freeze) {
  if (std::string why = unsupported(); !why.empty()) return {false, why};
  if (support_.version == CgroupSupport::Version::V2) {
    fs::path dir = fs::path(group_->procs_files().front()).parent_path();
    if (std::string why = write_value(dir / "cgroup.freeze", freeze ? "1" : "0"); !why.empty()) return {false, why};
    std::string want = freeze ? "frozen 1" : "frozen 0";
    if (!wait_for([&] { return read_control_file(dir / "cgroup.events").find(want) != std::string::npos; }))
      return {false, dir.string() + "/cgroup.events never said " + want};
    frozen_ = freeze;
    return {true, ""};
  }
  if (!freeze && v1_group_.empty()) return {true, ""};  // never frozen
  if (v1_group_.empty()) {
    fs::path parent = v1_freezer_parent();
    fs::path group = parent / name_;
    for (const auto& dir : {parent, group})
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return {false, "not supported here: " + os::errno_text("mkdir " + dir.string(), errno)};
    v1_group_ = group;
  }
  if (freeze) {
    // Until a round finds every process of the sandbox inside already: one
    // that forked meanwhile left a child where its parent was.
    for (int round = 0; round < 100; ++round) {
      auto inside = read_pids(v1_group_ / "cgroup.procs");
      bool moved = false;
      for (pid_t pid : read_pids(group_->procs_files().front())) {
        if (inside.count(pid)) continue;
        moved = true;
        write_value(v1_group_ / "cgroup.procs", std::to_string(pid));  // ESRCH: it just ended
      }
      if (!moved) break;
    }
  }
  const char* want = freeze ? "FROZEN" : "THAWED";
  if (std::string why = write_value(v1_group_ / "freezer.state", want); !why.empty()) return {false, why};
  if (!wait_for([&] { return read_control_file(v1_group_ / "freezer.state").rfind(want, 0) == 0; }))
    return {false, v1_group_.string() + "/freezer.state never said " + want};
  frozen_ = freeze;
  return {true, ""};
}

}  // namespace agentbox::sandbox
