// Starting and stopping process trees inside the sandbox (agent side).
// Every command tree hangs under its own small "reaper": a forked copy of the
// agent that is a child subreaper (PR_SET_CHILD_SUBREAPER), so processes that
// daemonize (double fork + setsid) are re-parented to it instead of escaping.
// The tree of a command is therefore exactly the reaper's descendants, and
// kill_tree() can stop all of them, daemons included.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace agentbox::agent {

struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd = "/workspace";
  int stdin_fd = -1;   // child's stdin; -1 = /dev/null
  int stdout_fd = -1;  // -1 = /dev/null
  int stderr_fd = -1;
  // stdin is a pseudo-terminal's end: the command gets a session of its own
  // with it as the controlling terminal (job control, SIGWINCH, ^C).
  bool terminal = false;
  // Further fds the command gets as 3, 4, ... in this order (at most 4): a
  // code context's request and reply pipes (code_contexts.h).
  std::vector<int> extra_fds;
};

struct Spawned {
  pid_t reaper = -1;
  pid_t pid = -1;       // the command itself
  int status_fd = -1;   // the reaper writes the command's wait status (int) here when it ends
};

// Forks the reaper, which forks the command. The fds in spec are duplicated
// into the child; the caller still owns (and should close) its copies.
// Throws SandboxError when fork fails (e.g. the process limit is reached).
// Only async-signal-safe calls happen between fork and exec: the agent is
// multithreaded.
Spawned spawn_supervised(const SpawnSpec& spec);

// All live descendants of pid (zombies excluded), from /proc.
std::vector<pid_t> descendants(pid_t pid);

// Sends sig to every descendant of reaper.
void signal_tree(pid_t reaper, int sig);

// SIGKILLs every descendant of reaper until none is left, then the reaper.
// Converges against fork bombs: each round kills every process it sees, so a
// process that forked in between is found in the next round.
void kill_tree(pid_t reaper);

// Whether a process exists and is not a zombie.
bool process_alive(pid_t pid);

// Reads the command's wait status from a reaper's status fd (blocking);
// -1 when the reaper died without reporting.
int read_wait_status(int status_fd);

// Signal number <-> name ("SIGTERM"); names are accepted with or without "SIG".
std::string signal_name(int sig);
int signal_number(const std::string& name);  // 0 when unknown

}  // namespace agentbox::agent
