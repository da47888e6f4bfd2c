// Terminals inside the sandbox (agent side, docs/terminals.md): a program on
// a pseudo-terminal of its own, under its own reaper (spawn.h) like a
// background process, whose output is kept twice: the raw bytes, bounded
// (head + tail, OutputBuffer) and replayable from any byte cursor still
// held, and the screen they draw, kept by a terminal emulator (screen.h).
// Reads and writes can wait for output to settle or for a pattern. The
// table lives as long as the agent, so a terminal outlives the host's
// connection; a teardown ends it and the server lists it `lost` after.
#pragma once

#include "agent/io.h"
#include "agent/methods.h"
#include "agent/processes.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::agent {

class TerminalTable {
 public:
  TerminalTable(IoLoop& io, const AgentConfig& config, SessionResolver resolve);
  ~TerminalTable();

  json start(const json& params);
  json write(AgentRequest& request);
  json read(AgentRequest& request);
  json resize(const json& params);
  json kill(const json& params);
  json list(const json& params);
  // Records terminals a teardown ended (status "lost").
  json adopt_lost(const json& params);
  void kill_all();

  static constexpr std::size_t kMaxRunning = 16;
  static constexpr std::size_t kMaxKept = 32;  // running or not; the oldest ended go first
  static constexpr int kMaxCols = 500, kMaxRows = 200, kMaxCells = 20'000;
  static constexpr std::size_t kMaxWrite = 64 * 1024;

 private:
  struct Terminal;
  std::shared_ptr<Terminal> find(const json& params);
  void watch(const std::shared_ptr<Terminal>& terminal, int read_fd, int status_fd);
  // Waits (lock held) as read and write do, then the result they return.
  json wait_and_show(std::unique_lock<std::mutex>& lock, Terminal& t, std::uint64_t cursor, const json& params,
                     AgentRequest& request);
  json describe(const Terminal& t) const;
  void make_room();  // lock held

  IoLoop& io_;
  const AgentConfig& config_;
  SessionResolver resolve_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Terminal>> terminals_;
  unsigned next_id_ = 1;
};

void register_terminal_methods(MethodTable& table, TerminalTable& terminals);

}  // namespace agentbox::agent
