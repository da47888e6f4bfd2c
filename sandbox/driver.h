// The Driver seam (docs/design.md, "Driver"): how the manager runs a sandbox,
// apart from what a sandbox is to the manager (a conversation's catalog row,
// its lock, its sessions and snapshots). A driver starts a box around the
// agent and attaches the agent's stdio to an AgentClient, stops it, freezes
// and thaws it, exports and imports its workspace, and lists what it left on
// the host so recovery can find left-overs. The manager calls only this
// interface; bwrap_driver.h is the first implementation (bubblewrap, cgroups,
// a root server's staging, each sandbox's own filesystem), chosen in one
// place (make_driver), so another engine is an addition.
//
// Caveat: the directories of a sandbox are the host's <state>/sandboxes/<id>
// (SandboxDirs) for every driver: snapshots read them and restores write
// them (persistence/store.h), and a driver that keeps the workspace
// elsewhere copies it there in export_workspace/import_workspace.
#pragma once

#include "os/unique_fd.h"
#include "persistence/store.h"
#include "persistence/warm.h"
#include "sandbox/agent_client.h"
#include "sandbox/bwrap_plan.h"

#include <filesystem>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

struct CgroupSupport;
class Disks;
struct ManagerOptions;

// A freeze or thaw: done, or why not ("not supported here: <why>").
struct FreezeResult {
  bool done = false;
  std::string why;
  std::string method;  // when done: "cgroup freezer" or "SIGSTOP" (agent/freeze.h)
};

// One running box: what the driver holds between start and stop.
class Box {
 public:
  virtual ~Box() = default;  // ends what is left of it (processes, its cgroup); not its directories
  // The agent's client, attached to the box's stdio.
  virtual std::shared_ptr<AgentClient> agent() const = 0;
  // A box started held (Driver::start) waits before the sandbox proper
  // starts; this lets it go. Once; later calls do nothing.
  virtual void release() = 0;
  // Ends the agent (AgentClient::stop) and whatever else is left of the box
  // (bwrap: kills what is left in its cgroup and removes the group).
  // Idempotent; the destructor does it too.
  virtual void stop() = 0;
  // Stops every process of the box where it stands, and lets them go on.
  virtual FreezeResult freeze() = 0;
  virtual FreezeResult thaw() = 0;
  // The CPU quota it enforces, in CPUs; 0 when none. Whether memory and
  // the process count are held for the whole box (limits_report.cpp).
  virtual double cpu_quota() const = 0;
  virtual bool limits_memory() const = 0;
  virtual bool limits_pids() const = 0;
  // A listening TCP socket on 127.0.0.1:port inside the box's network
  // namespace, for the host's egress proxy (net_namespace.h). Throws SandboxError.
  virtual os::UniqueFd listen_inside(std::uint16_t port) = 0;
  // Unconnected TCP sockets (1 to 16) in the box's network namespace, for
  // the relay of an exposed port to connect to a port inside
  // (net_namespace.h, docs/design.md section 12). Throws SandboxError.
  virtual std::vector<os::UniqueFd> sockets_inside(std::size_t count) = 0;
};

// What a driver leaves on the host for its sandboxes, found by listing (not
// by the catalog): what recovery and `doctor` look at for left-overs.
struct Owned {
  std::vector<std::filesystem::path> sandbox_dirs;  // <state>/sandboxes/<id>
  std::vector<std::filesystem::path> disk_images;   // <state>/disks/<id>.img
  std::vector<std::filesystem::path> mounts;        // sandbox directories that are mount points now
  std::vector<std::filesystem::path> cgroups;       // sandbox-<id> groups under the agentbox parents
};

class Driver {
 public:
  virtual ~Driver() = default;
  virtual std::string name() const = 0;

  // Starts a box on the sandbox's directories (made ready here: its own
  // filesystem, workspace, home, tmp, generated etc; dirs.owner set by the
  // caller as root). held: the box waits for Box::release() before the
  // sandbox proper starts (a spare made ahead). The agent's hello is the
  // caller's to await. Throws SandboxError(SANDBOX_START_FAILED).
  virtual std::unique_ptr<Box> start(const std::string& id, const SandboxDirs& dirs, bool held) = 0;

  // The storage under a sandbox's directory (bwrap: its own filesystem,
  // disk.h). ensure: ready to write (a fresh one after a teardown); drop:
  // gone with what is in it, false when there is none (the caller removes
  // the trees one by one); detach: unmounted, kept (shutdown).
  virtual void ensure_storage(const std::filesystem::path& root) = 0;
  virtual bool drop_storage(const std::filesystem::path& root) noexcept = 0;
  virtual void detach_storage(const std::filesystem::path& root) noexcept = 0;
  // Detaches every sandbox's storage whose lock is free, and what holds it
  // (bwrap: the disk pool), at server shutdown.
  virtual void detach_idle_storage() = 0;
  // Forks made now (docs/design.md section 9, "Fork"): copies of a running
  // sandbox's storage at one instant, at a cost that does not grow with it
  // (bwrap: clones of its disk image, disk_pool.h). clone_support: empty
  // when clone_storage works here, else why not. clone_storage makes one
  // copy per root, not yet a sandbox's (nothing mounts or adopts it, a
  // start removes it); install_clone makes one the storage of its root;
  // discard_clone removes one. Throw SandboxError.
  virtual std::string clone_support() const = 0;
  virtual void clone_storage(const SandboxDirs& from, const std::vector<std::filesystem::path>& to_roots,
                             const std::function<void()>& on_frozen = {}) = 0;
  // The host ids the files on a sandbox's storage are stored under, when
  // they are not its own (a clone's: disk_owner.h); what a restore into it
  // unpacks as.
  virtual std::optional<std::pair<unsigned, unsigned>> storage_owner(const std::filesystem::path& root) const = 0;
  virtual void install_clone(const std::filesystem::path& root) = 0;
  // Writes what the sandbox's storage holds in memory to disk, while its
  // processes run: a freeze after it has little left to flush. Best effort.
  virtual void flush_storage(const SandboxDirs& dirs) noexcept = 0;
  virtual void discard_clone(const std::filesystem::path& root) noexcept = 0;
  // Where a stopped sandbox's storage is kept as its warm copy
  // (persistence/warm.h; docs/design.md section 9, "Warm restore").
  virtual persistence::ParkedStorage& parking() = 0;

  // The workspace and home out to a snapshot, and back, through the
  // snapshot store (persistence/store.h: archives, digests, the catalog).
  virtual persistence::SnapshotRecord export_workspace(persistence::SnapshotStore& store, const std::string& id,
                                                       const std::string& label, const std::string& reason,
                                                       const persistence::ArchiveProgressFn& progress = {}) = 0;
  virtual persistence::ExtractResult import_workspace(persistence::SnapshotStore& store,
                                                      const persistence::SnapshotRecord& snapshot,
                                                      std::optional<std::pair<unsigned, unsigned>> owner,
                                                      const persistence::ArchiveProgressFn& progress = {}) = 0;

  // What it owns on the host now, and the removal of what no server drives
  // any more (stale cgroups a crash left).
  virtual Owned owned() const = 0;
  virtual void remove_stale() = 0;

  // What the host gives this driver's boxes (limits, workspace size), for
  // sandbox_status, doctor and the tests.
  virtual const CgroupSupport& cgroups() const = 0;
  virtual const Disks& disks() const = 0;
};

// The one place a driver is chosen. sandbox_user: how a root server's
// sandbox ids are described in messages.
std::unique_ptr<Driver> make_driver(const ManagerOptions& options, const persistence::StateLayout& layout,
                                    const std::string& sandbox_user);

}  // namespace agentbox::sandbox
