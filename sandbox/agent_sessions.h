// Shell sessions and exec (agent side).
//
// A session is one long-lived `bash` under a reaper (agent_spawn.h), reading
// instructions on a pipe. Each exec writes the command to a file and sends
//   { . cmd.N; } <stdin >out.N 2>err.N; __ab_done $?
// so the command runs in the shell itself: cd, export, functions and aliases
// persist, heredocs need no escaping, and output goes to per-command FIFOs
// (jobs left running with & keep the old FIFO, which the agent drains, so
// they never block or leak into the next command's output). __ab_done reports
// the exit code and cwd on the shell's stdout, then saves the shell's state
// (variables, functions, aliases, options, cwd) to a file.
//
// A timeout or cancellation kills the session's whole tree (daemons
// included) and the next command starts a fresh shell from the saved state:
// the session is as it was after the last completed command (docs/design.md
// section 8). A command that ends the shell (exit, exec) is handled the same
// way. Jobs started with & in that session end with it.
#pragma once

#include "sandbox/agent_methods.h"
#include "sandbox/agent_processes.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace agentbox::sandbox {

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
  struct Session;
  struct Run;
  std::shared_ptr<Session> get(const std::string& name);
  std::shared_ptr<Session> add(const std::string& name, const std::string& cwd,
                               const std::map<std::string, std::string>& env);
  void start_shell(Session& session);
  void stop_shell(Session& session);
  json finish(Session& session, Run& run);
  // Reads the shell's report pipe: exit code and cwd tokens go to report,
  // save markers are counted off. False at EOF or error.
  bool read_report(Session& session, std::string& report);
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

}  // namespace agentbox::sandbox
