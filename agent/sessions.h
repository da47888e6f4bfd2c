// Shell sessions (agent side): session.create/list/delete/export/import,
// and the session an exec runs in (exec.h runs it).
//
// A session is one long-lived `bash` under a reaper (spawn.h), reading
// instructions on a pipe; after every command it saves the shell's state
// (variables, functions, aliases, options, cwd) to a file, so a fresh shell
// can take over from it: after a timeout or cancellation, a command that
// ended the shell, an idle shell stopped to save memory, or a restore.
#pragma once

#include "agent/methods.h"
#include "agent/processes.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace agentbox::agent {

struct Session;  // session.h

class Sessions {
 public:
  Sessions(const AgentConfig& config, IoLoop& io, ProcessTable& processes);
  ~Sessions();

  json create(const json& params);
  json list();
  json remove(const json& params);
  // Sessions' saved state, for the server to keep across teardown and
  // restarts: {"sessions":[{"session","cwd","state"}]}; import recreates them.
  json export_state();
  json import_state(const json& params);
  json exec(AgentRequest& request);
  // The session's cwd and state file, for file operations (no waiting).
  SessionContext context(const std::string& name);
  // The same for process_start: waits for a command running in the session
  // and for the state it leaves to be saved, so the process sees the session
  // as the next exec would.
  SessionContext settled_context(const std::string& name);
  std::vector<std::string> names();
  void kill_all();

 private:
  std::shared_ptr<Session> get(const std::string& name);
  std::shared_ptr<Session> add(const std::string& name, const std::string& cwd,
                               const std::map<std::string, std::string>& env);
  // Reads save markers until none is pending or the deadline passes; the
  // caller holds the session's run lock.
  void wait_for_saves(Session& session, std::chrono::steady_clock::time_point deadline);
  // Idle shells: a thread ends shells that have been idle for
  // config_.shell_idle with no process of their own left.
  void idle_loop();
  void stop_idle_shells();

  const AgentConfig& config_;
  IoLoop& io_;
  ProcessTable& processes_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  unsigned next_dir_ = 1;
  std::mutex idle_mutex_;
  std::condition_variable idle_wake_;
  bool stopping_ = false;  // guarded by idle_mutex_
  std::thread idle_thread_;
};

}  // namespace agentbox::agent
