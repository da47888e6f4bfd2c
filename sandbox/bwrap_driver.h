// The bubblewrap driver (driver.h), the default: each box is bwrap around
// the agent (the plan as data: bwrap_plan.h), in a cgroup of its own where
// the server may make one (cgroups.h; frozen through freezer.h), started by
// launch.h. A root server stages the sandbox's directories in a private
// mount namespace of the launcher (staging.h) and gives each sandbox its own
// filesystem (disk.h); the directories are made by descriptor (host_dirs.h).
// A box started held is a launcher already in its cgroup that waits in a
// small shell for a line on its gate before it execs bwrap (the cgroup join,
// ~10 ms on cgroup v1, is paid ahead; spare_pool.h).
#pragma once

#include "sandbox/cgroups.h"
#include "sandbox/disk.h"
#include "sandbox/driver.h"
#include "sandbox/launch.h"
#include "sandbox/parking.h"
#include "sandbox/manager.h"

#include <filesystem>
#include <memory>
#include <string>

namespace agentbox::sandbox {

class BwrapDriver final : public Driver {
 public:
  // Detects cgroups, makes <state>/sandboxes, starts the disks (before
  // recovery reads the live directories) and opens the agent binary.
  BwrapDriver(const ManagerOptions& options, persistence::StateLayout layout, const std::string& sandbox_user);
  ~BwrapDriver() override;
  BwrapDriver(const BwrapDriver&) = delete;
  BwrapDriver& operator=(const BwrapDriver&) = delete;

  std::string name() const override { return "bwrap"; }
  std::unique_ptr<Box> start(const std::string& id, const SandboxDirs& dirs, bool held) override;

  void ensure_storage(const std::filesystem::path& root) override;
  bool drop_storage(const std::filesystem::path& root) noexcept override;
  void detach_storage(const std::filesystem::path& root) noexcept override;
  void detach_idle_storage() override;
  std::string clone_support() const override;
  void clone_storage(const SandboxDirs& from, const std::vector<std::filesystem::path>& to_roots,
                     const std::function<void()>& on_frozen) override;
  std::optional<std::pair<unsigned, unsigned>> storage_owner(const std::filesystem::path& root) const override;
  void flush_storage(const SandboxDirs& dirs) noexcept override;
  void install_clone(const std::filesystem::path& root) override;
  void discard_clone(const std::filesystem::path& root) noexcept override;
  persistence::ParkedStorage& parking() override { return *parking_; }

  persistence::SnapshotRecord export_workspace(persistence::SnapshotStore& store, const std::string& id,
                                               const std::string& label, const std::string& reason,
                                               const persistence::ArchiveProgressFn& progress) override;
  persistence::ExtractResult import_workspace(persistence::SnapshotStore& store,
                                              const persistence::SnapshotRecord& snapshot,
                                              std::optional<std::pair<unsigned, unsigned>> owner,
                                              const persistence::ArchiveProgressFn& progress) override;

  Owned owned() const override;
  void remove_stale() override;

  const CgroupSupport& cgroups() const override { return cgroups_; }
  const Disks& disks() const override { return *disks_; }

 private:
  // Returns the ids its files are stored under when they are not dirs.owner.
  std::optional<std::pair<unsigned, unsigned>> prepare_dirs(const SandboxDirs& dirs, const BwrapOptions& plan);
  BwrapOptions plan_for(const SandboxDirs& dirs) const;
  // Where sandbox-<id> cgroups live: the limit groups' parents and the v1 freezer's.
  std::vector<std::filesystem::path> group_parents() const;
  LaunchSpec launch_spec(BwrapOptions plan, const Cgroup* cgroup) const;

  ManagerOptions options_;
  persistence::StateLayout layout_;
  bool root_ = false;
  CgroupSupport cgroups_;
  std::unique_ptr<Disks> disks_;
  std::unique_ptr<DriverParking> parking_;
  std::optional<AgentCopy> agent_copy_;
  std::filesystem::path agent_binary_;  // agent_copy_'s path
  int agent_fd_ = -1;  // O_PATH fd of agent_binary_, bound into each sandbox by bwrap
  std::shared_ptr<const CaTrust> ca_trust_;  // with an intercepting proxy (bwrap_plan.h)
};

}  // namespace agentbox::sandbox
