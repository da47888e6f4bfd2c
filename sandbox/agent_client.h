// The server's JSON-RPC client of one sandbox's agent: requests with ids,
// per-call timeouts and notification routing (streamed output) over the
// agent's stdin/stdout (rpc/framing.h), read by its own reader thread. Who
// starts the process is the driver's business (driver.h; launch.h for
// bubblewrap): the client is handed a running process to attach to.
// When the agent dies every pending call fails with SANDBOX_FAILED and the
// client stays dead; the manager starts a new one on the next call. A line
// from the agent that is not what the agent sends (not JSON, wrong types, an
// id never sent, too deep, too long) ends the sandbox the same way: the box
// controls that pipe (docs/sandbox.md, "The wall between host and box").
//
// Caveat: the process is started from the client's own reader thread
// (attach() runs the start function there), because bwrap's
// --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that forked it
// ends, not the process.
#pragma once

#include "contract/errors.h"
#include "sandbox/launch.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace agentbox::sandbox {

using json = nlohmann::json;

class AgentClient : public std::enable_shared_from_this<AgentClient> {
 public:
  // The outcome of one call: a result, or the error that replaced it.
  struct Outcome {
    json result;
    std::optional<SandboxError> error;
  };
  using Callback = std::function<void(Outcome)>;
  using NoteSink = std::function<void(const std::string& method, const json& params)>;

  // Starts a process on the client's reader thread (see the caveat above)
  // and reads its stdout; returns once it runs. Throws what start throws
  // (LaunchError: SANDBOX_START_FAILED with the step and errno).
  using StartFn = std::function<LaunchedProcess()>;
  static std::shared_ptr<AgentClient> attach(StartFn start, std::string name);
  // Waits for the agent's hello (apart from attach(), so a launcher can be
  // started ahead and released later). Throws SandboxError
  // (SANDBOX_START_FAILED) with bwrap's own explanation from its stderr.
  void await_hello(std::chrono::milliseconds hello_timeout);
  ~AgentClient();

  // Sends a request; callback runs exactly once (on a client thread). Returns
  // the request id, for cancel().
  std::uint64_t call_async(const std::string& method, json params, std::chrono::milliseconds timeout,
                           Callback callback, NoteSink notes = {});
  // call_async only when the request can be handed to the agent at once:
  // no other writer holds the pipe and it has room for the whole line. False
  // (and callback dropped, nothing sent) otherwise. For callers on a thread
  // that must never block, such as the server's stdin reader.
  std::optional<std::uint64_t> try_call_async(const std::string& method, const json& params,
                                              std::chrono::milliseconds timeout, Callback& callback,
                                              const NoteSink& notes = {});
  // Blocking form; throws SandboxError.
  json call(const std::string& method, json params, std::chrono::milliseconds timeout, NoteSink notes = {});
  // Asks the agent to stop the request (the command's processes are killed).
  void cancel(std::uint64_t id);

  // Ends the sandbox because something it sent was malformed (why is
  // logged and becomes the death reason): pending calls fail with
  // SANDBOX_FAILED, alive() turns false at once. For readers of results too.
  void reject(const std::string& why);

  bool alive() const;
  // True once stop() was called (a teardown, not a crash).
  bool stopped() const;
  std::string death_reason() const;
  pid_t pid() const { return pid_; }
  // Closes the agent's stdin (it kills everything and exits), then kills bwrap
  // if it lingers. Pending calls fail.
  void stop();

 private:
  struct Pending {
    Callback callback;
    NoteSink notes;
    std::chrono::steady_clock::time_point deadline;
  };
  AgentClient() = default;
  void reader_main(StartFn start);
  void stderr_main();
  void watchdog_main();
  void fail_all(const std::string& code, const std::string& message);
  void deliver(std::uint64_t id, Outcome outcome);
  void run_callback(Callback& callback, Outcome outcome);
  // Routes one line from the agent; what was wrong with it, or empty.
  std::string handle_line(const std::string& line);
  // Whether id is one this client sent (as out).
  bool issued_id(const json& id, std::uint64_t& out) const;
  bool send(const json& message);
  // Registers a call's callback; false (with why, when asked) once the agent is gone.
  bool register_pending(std::uint64_t id, Callback& callback, NoteSink notes, std::chrono::milliseconds timeout,
                        std::string* refusal);
  // Writes line only when that cannot block: no other writer, room in the
  // pipe. before() runs under the write lock just ahead of the write; false
  // from it, like no room, means nothing was written.
  bool try_write(const std::string& line, const std::function<bool()>& before = {});

  pid_t pid_ = -1;
  int to_agent_ = -1;
  std::size_t to_agent_capacity_ = 0;  // bytes the pipe to the agent holds
  int from_agent_ = -1;
  int stderr_fd_ = -1;
  std::string name_;

  std::timed_mutex write_mutex_;  // timed: stop() must not wait forever on a writer a stuck agent blocks
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool launched_ = false;
  std::exception_ptr launch_error_;  // what start threw
  bool dead_ = false;
  bool stopping_ = false;
  std::string death_reason_;
  std::string rejection_;            // why reject() ended the sandbox
  std::atomic<bool> rejected_{false};  // read by the reader loop without the lock
  std::vector<std::string> stderr_tail_;
  std::map<std::uint64_t, Pending> pending_;
  std::uint64_t next_id_ = 1;
  // When the watchdog will next look at deadlines unless woken.
  std::chrono::steady_clock::time_point watchdog_wake_ = std::chrono::steady_clock::time_point::max();
  std::thread reader_, stderr_reader_, watchdog_;
};

// Plain-words explanation of why bwrap could not start, from its stderr
// (shared with `doctor`).
std::string explain_start_failure(const std::string& bwrap_stderr);

}  // namespace agentbox::sandbox
