// How a root server's sandbox reaches its own directories. bwrap runs as the
// unprivileged sandbox user and resolves every bind source with realpath(),
// --bind-fd included (it rebinds "/proc/self/fd/N" by the path that link
// names), so a state directory under a 0700 parent, such as root's default
// /root/.local/state/agentbox, cannot be bound by path or by fd.
//
// So the launcher, forked from the server and still root, first enters a
// private mount namespace of its own, mounts a small tmpfs on kStagingDir
// (root's, 0755, under /run) and bind-mounts there the sandbox's workspace,
// home, tmp and generated etc and the agent binary, each opened with
// O_NOFOLLOW from dirs.root (which stays root's) so a symlink the sandbox user
// planted is refused, never followed. Then it drops to the sandbox user and
// execs bwrap with BwrapOptions::staged_dir = kStagingDir. Those mounts exist
// only in that launcher's namespace (a slave of the host's: nothing
// propagates back) and vanish with the sandbox; other sandboxes, started
// concurrently, each have their own.
//
// An unprivileged server needs none of this: bwrap runs as the server's own
// user, who can walk its own state directory.
#pragma once

#include "os/unique_fd.h"
#include "sandbox/bwrap_plan.h"

#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace agentbox::sandbox {

inline constexpr const char* kStagingDir = "/run/agentbox-staging";

class Staging {
 public:
  // sandbox_root: dirs.root; agent: the agent executable's host path.
  Staging(std::filesystem::path sandbox_root, std::filesystem::path agent,
          std::filesystem::path mount_point = kStagingDir);

  // In the forked child, as root, before dropping privileges: sets up the
  // namespace and mounts described above. Async-signal-safe (no allocation).
  // On failure writes a line saying what failed to err_fd and returns false.
  bool enter(int err_fd) const noexcept;

  // A fork's disk is a clone of its source's, its files owned on disk by
  // the source's host ids (disk_owner.h): the workspace, home and tmp are
  // then mounted idmapped through this user namespace (on-disk ids as the
  // box's), the files left as they are.
  void set_idmap(std::shared_ptr<os::UniqueFd> userns) { idmap_ = std::move(userns); }

 private:
  std::string root_, agent_, mount_point_;
  static constexpr std::size_t kDirs = std::size(kStagedDirs);
  std::string targets_[kDirs + 1];  // mount_point/<kStagedDirs...>, then mount_point/kStagedAgent
  std::string names_[kDirs];        // "/workspace", ... (for messages)
  std::vector<std::string> sandbox_mounts_;  // mount points under <state> when made (enter detaches them)
  std::shared_ptr<os::UniqueFd> idmap_;
};

}  // namespace agentbox::sandbox
