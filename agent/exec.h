// exec (agent side): one command in a session's shell.
//
// The command is written to a file and the shell sent
//   { . cmd.N; } <stdin >out.N 2>err.N; __ab_done $?
// so the command runs in the shell itself: cd, export, functions and aliases
// persist, heredocs need no escaping, and output goes to per-command FIFOs
// (jobs left running with & keep the old FIFO, which the agent drains, so
// they never block or leak into the next command's output). __ab_done reports
// the exit code and cwd on the shell's stdout, then saves the shell's state.
//
// The timeout is enforced here. A timeout or cancellation kills the
// session's whole tree (daemons included) and the next command starts a
// fresh shell from the saved state: the session is as it was after the last
// completed command (docs/design.md section 8). A command that ends the shell
// (exit, exec) is handled the same way. Jobs started with & in that session
// end with it.
#pragma once

#include "agent/methods.h"
#include "agent/processes.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::agent {

struct Session;  // session.h

// What an exec asks for, checked before its session is looked up (a missing
// command is INVALID_ARGUMENTS whatever the session).
struct ExecRequest {
  std::string command;
  std::chrono::milliseconds timeout{contract::kDefaultTimeoutMs};
  std::map<std::string, std::string> env;  // for this command only
  // 0: wait for the end. Else, a command still running after this long is
  // answered with {running, process_id, output so far} and goes on under
  // the process tools (docs/design.md, "exec that yields").
  std::chrono::milliseconds yield{0};
};
ExecRequest parse_exec(const json& params);

// What an exec uses besides its session: the agent's configuration, the I/O
// loop that drains FIFOs background jobs keep open, the process table that
// keeps a truncated output pageable, and the mutex of Sessions that guards
// a session's cwd and deleted flag.
struct ExecEnv {
  const AgentConfig& config;
  IoLoop& io;
  ProcessTable& processes;
  std::mutex& sessions_mutex;
};

// Runs the command in session s and returns the exec result (exit_code,
// stdout, stderr, ...; docs/protocol.md). Takes the session's run lock: one
// command at a time per session.
json run_exec(AgentRequest& request, const ExecRequest& exec, std::shared_ptr<Session> s, const ExecEnv& ctx);

}  // namespace agentbox::agent
