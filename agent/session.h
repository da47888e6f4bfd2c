// One session's shell as the agent keeps it: sessions.cpp starts, stops and
// lists sessions, exec.cpp runs commands in them. Internal to agent/.
#pragma once

#include "agent/spawn.h"

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace agentbox::agent {

struct Session {
  std::string name;
  std::string dir;
  std::mutex run;  // one command at a time; everything below is guarded by it
  Spawned shell;
  int control_fd = -1;  // the shell's stdin
  // The shell's stdout: "<exit code>\0<cwd>\0" when a command ends, then
  // "s\0" once its state is saved (the save runs after the reply).
  int report_fd = -1;
  std::string report_bytes;  // read but not yet consumed
  int saves_pending = 0;     // commands reported whose "s\0" has not been read
  unsigned seq = 0;
  std::string cwd;      // guarded by Sessions::mutex_
  bool deleted = false;  // guarded by Sessions::mutex_
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();  // guarded by run
};

// Starts the session's bash under a reaper, reading instructions on a pipe;
// it sources the session's rc and saved state first.
void start_shell(Session& s, const std::vector<std::string>& environment);
// Kills the shell's whole tree and forgets its pipes; the next command
// starts a fresh shell from the saved state.
void stop_shell(Session& s);
// Reads the shell's report pipe: exit code and cwd tokens go to report,
// save markers are counted off. False at EOF or error.
bool read_report(Session& s, std::string& report);

}  // namespace agentbox::agent
