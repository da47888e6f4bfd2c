// The process table's record of one process (processes.h), shared by the
// files that implement the table. Internal to agent/.
#pragma once

#include "agent/processes.h"

#include <chrono>
#include <cstdint>
#include <sys/types.h>

namespace agentbox::agent {

// Wall-clock milliseconds since the epoch.
inline std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct ProcessTable::Record {
  Record(std::size_t head, std::size_t tail) : out(head, tail), err(head, tail) {}
  std::string id;
  std::string command;
  bool background = true;
  pid_t reaper = -1;
  pid_t pid = -1;
  std::string status = "running";
  std::optional<int> exit_code;
  std::string signal;
  OutputBuffer out, err;
  int open_streams = 0;
  int stdin_fd = -1;
  std::string status_bytes;  // the reaper's report arrives as 4 raw bytes
  bool kill_requested = false;
  bool service = false;  // restart "on-restore": kept in the services file (services.h)
  // Wall-clock milliseconds (the host's clock: a box has no time namespace)
  // of the start and the end; the server shows what its network proxy
  // denied in between (docs/network.md, "Deny reasons"). 0: unknown.
  std::int64_t started_unix_ms = 0, ended_unix_ms = 0;
  // A yielded exec (exec.h): process_kill ends it through this, since its
  // command runs in a session's shell rather than under a reaper.
  std::function<void()> cancel;
  std::condition_variable changed;
};

}  // namespace agentbox::agent
