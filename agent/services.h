// Services: background processes started with `restart: "on-restore"`
// (docs/design.md section 9, "Services"). What it takes to start one again
// (command, cwd, extra variables, and the session's state as it was when it
// started) is kept in a file in the sandbox's home, so it travels with the
// workspace: snapshots, restores, forks and a server restart all carry it,
// and a restore to an older snapshot brings back the services of then.
//
// The file is written by the agent and readable and writable by whatever
// runs in the sandbox, so reading it trusts nothing: a file that is not the
// expected shape, or over the limits below, starts nothing and says why.
#pragma once

#include <nlohmann/json.hpp>


#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentbox::agent {

struct Service {
  std::string process_id;  // kept across restarts: process_wait on it works again
  std::string command;
  std::string cwd;  // absolute
  std::vector<std::pair<std::string, std::string>> env;
  std::string session_state;  // the session's state script when it started (sourced first)
};

// The sandbox's $HOME from the environment the agent gives commands.
std::string sandbox_home(const std::vector<std::string>& environment);
// A session's state script (empty when it has none), for a service to
// start from again. Throws SandboxError over ServiceFile::kMaxStateBytes.
std::string read_session_state(const std::string& path);

class ServiceFile {
 public:
  // home: the sandbox's $HOME; the file is home/.local/state/agentbox/services.json.
  explicit ServiceFile(std::string home);

  // The recorded services; an absent file is none. Throws SandboxError
  // (INVALID_ARGUMENTS) naming what is wrong with a file that is not one.
  std::vector<Service> load() const;
  // Adds or replaces the service with s.process_id. Throws SandboxError.
  void put(const Service& s);
  // Forgets it (process_kill); false when it was not recorded.
  bool remove(const std::string& process_id);
  const std::string& path() const { return path_; }

  static constexpr std::size_t kMaxServices = 64;
  static constexpr std::size_t kMaxFileBytes = 4 * 1024 * 1024;
  static constexpr std::size_t kMaxStateBytes = 256 * 1024;  // of one session state

 private:
  void save(const std::vector<Service>& services) const;
  std::string path_;
};

}  // namespace agentbox::agent
