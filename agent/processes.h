// Background processes inside the sandbox (agent side): start, list, page
// output, wait for exit or a listening port, signal, write to stdin. Each
// process runs under its own reaper (spawn.h) so signals and kills reach
// its whole tree. Output is kept in bounded buffers and stays readable after
// the process ends. The table also keeps the full output of exec calls whose
// inline result was cut, so process_output can page it.
#pragma once

#include "agent/io.h"
#include "agent/methods.h"
#include "agent/output_buffer.h"
#include "agent/services.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace agentbox::agent {

// What a process needs from the session it starts in.
struct SessionContext {
  std::string state_file;  // sourced first: the session's cwd, env, functions
  std::string cwd;
};
using SessionResolver = std::function<SessionContext(const std::string& name)>;

class ProcessTable {
  struct Record;

 public:
  ProcessTable(IoLoop& io, const AgentConfig& config, SessionResolver resolve);
  ~ProcessTable();

  json start(const json& params);
  json list(const json& params);  // a page from after `cursor` (a process_id), within the inline cap
  json output(AgentRequest& request);
  json wait(AgentRequest& request);
  json kill(const json& params);
  json write(const json& params);
  // Keeps the complete output of a finished exec under an id from
  // reserve_exec_id() (the id goes into the exec's truncation marker first).
  std::string reserve_exec_id();
  void add_exec_output(const std::string& id, const std::string& command, OutputBuffer out, OutputBuffer err,
                       int exit_code);
  // An exec that yielded (exec.h) goes on under the table as a running
  // process: the exec's thread feeds its output and reports its end;
  // process_kill calls `cancel`, which kills the session's tree.
  class ExecFeed {
   public:
    void append(bool is_err, std::string_view data);
    void ended(int exit_code, const std::string& signal, bool killed);

   private:
    friend class ProcessTable;
    ProcessTable* table_ = nullptr;
    std::shared_ptr<Record> record_;
  };
  ExecFeed add_running_exec(const std::string& id, const std::string& command, pid_t pid, OutputBuffer out,
                            OutputBuffer err, std::int64_t started_unix_ms, std::function<void()> cancel);
  std::vector<std::string> background_ids();
  // Records processes a teardown ended (status "lost"), so process_list
  // after a restore says what happened to them.
  json adopt_lost(const json& params);
  // Starts the services the services file lists that this agent does not
  // run (after a restore, a fork or a server restart), each with its old id:
  // {started[] {process_id, command}, failed[] {process_id, error}, problem?}.
  json restore_services(const json& params);
  void kill_all();

  static constexpr std::size_t kMaxBackground = 64;
  static constexpr std::size_t kMaxExecOutputs = 16;
  static constexpr std::size_t kShownCommandCost = 200;  // of a command in results (shown_cost)

 private:
  // What a start needs, from process_start or from the services file.
  struct Launch {
    std::string id;  // empty: a new one
    std::string command;
    std::string cwd;
    std::string cwd_hint;  // added to an INVALID_CWD message
    std::string state_file;  // sourced first
    std::vector<std::pair<std::string, std::string>> env;
    std::optional<Service> service;  // restart "on-restore"
    bool record_service = true;  // write it to the services file
  };
  std::shared_ptr<Record> launch(const Launch& launch);
  std::shared_ptr<Record> find(const json& params);
  void watch_streams(const std::shared_ptr<Record>& record, int out_fd, int err_fd, int status_fd);
  json describe(const Record& record) const;

  IoLoop& io_;
  const AgentConfig& config_;
  SessionResolver resolve_;
  ServiceFile services_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Record>> records_;
  std::deque<std::string> exec_ids_;
  unsigned next_id_ = 1;
};

// Resolves a sandbox path against a working directory.
std::string resolve_path(const std::string& cwd, const std::string& path);
// POSIX shell single-quoting.
std::string shell_quote(const std::string& s);
// Whether name can be an environment variable a shell accepts.
bool valid_env_name(const std::string& name);
// params.signal as a signal number (a name like "SIGTERM" or a number), or
// fallback when absent; INVALID_ARGUMENTS when unknown.
int param_signal(const json& params, int fallback);
// Writes a whole file (used for command scripts); throws SandboxError.
void write_text_file(const std::string& path, const std::string& content);

}  // namespace agentbox::agent
