// Conversations to sandboxes. The manager starts a sandbox on a
// conversation's first call, keeps at most max_sandboxes running (the least
// recently used idle one is torn down to make room), restarts a sandbox whose
// agent died (telling the next caller what was lost), and destroys them.
// The map lives in memory for now; the persistence issue adds the catalog.
#pragma once

#include "sandbox/agent_client.h"
#include "sandbox/bwrap_plan.h"
#include "sandbox/cgroups.h"
#include "sandbox/limits.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::sandbox {

struct ManagerOptions {
  std::filesystem::path state_dir;
  bool network_host = false;
  Limits limits;
  std::size_t max_sandboxes = 8;
  std::string bwrap = "/usr/bin/bwrap";
  // The agent executable and the arguments that select agent mode; empty
  // means this very binary with "agent".
  std::filesystem::path agent_binary;
  std::vector<std::string> agent_args = {"agent"};
  // Host uid/gid sandboxes run as when the server is root (unprivileged).
  unsigned sandbox_uid = 65534;
  unsigned sandbox_gid = 65534;
  std::chrono::milliseconds start_timeout{10'000};
};

class Sandbox {
 public:
  const std::string& id() const { return id_; }
  const std::string& conversation() const { return conversation_; }
  const SandboxDirs& dirs() const { return dirs_; }
  // "active", "stopped" (torn down by the server) or "failed" (the agent
  // died); DESIGN.md section 8 vocabulary.
  std::string state() const;
  std::shared_ptr<AgentClient> client() const;
  // Bytes under /workspace (walks the tree).
  std::uint64_t workspace_bytes() const;

 private:
  friend class Manager;
  friend class Lease;
  std::string id_;
  std::string conversation_;
  SandboxDirs dirs_;
  mutable std::mutex mutex_;
  std::shared_ptr<AgentClient> client_;
  std::unique_ptr<Cgroup> cgroup_;
  std::chrono::steady_clock::time_point last_used_;
  int in_use_ = 0;
};

// A sandbox held for one call; releases on destruction (for LRU accounting).
class Lease {
 public:
  Lease(std::shared_ptr<Sandbox> sandbox, std::string notice);
  ~Lease();
  Lease(Lease&&) = default;
  Sandbox& sandbox() const { return *sandbox_; }
  AgentClient& agent() const;
  // Non-empty when the sandbox had to be restarted: what the caller lost.
  const std::string& notice() const { return notice_; }

 private:
  std::shared_ptr<Sandbox> sandbox_;
  std::string notice_;
};

class Manager {
 public:
  explicit Manager(ManagerOptions options);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // The conversation's running sandbox, started (or restarted) as needed.
  // Throws SandboxError(SANDBOX_START_FAILED) with a plain explanation.
  Lease acquire(const std::string& conversation);
  // The sandbox if it exists, without starting one.
  std::shared_ptr<Sandbox> find(const std::string& conversation);
  // Stops the sandbox and deletes its directories. False when there was none.
  bool destroy(const std::string& conversation);
  // Stops every sandbox, keeping their directories (server shutdown).
  void shutdown();

  const ManagerOptions& options() const { return options_; }
  const CgroupSupport& cgroups() const { return cgroups_; }
  std::size_t running() const;

 private:
  std::shared_ptr<Sandbox> start_locked(const std::string& conversation, std::shared_ptr<Sandbox> previous);
  void prepare_dirs(const Sandbox& sandbox, const BwrapOptions& plan);
  void evict_if_full_locked();
  void stop(Sandbox& sandbox);

  ManagerOptions options_;
  CgroupSupport cgroups_;
  bool root_ = false;
  std::filesystem::path agent_binary_;
  mutable std::mutex mutex_;  // guards sandboxes_; held while a sandbox starts
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
};

}  // namespace agentbox::sandbox
