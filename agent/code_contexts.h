// Code contexts inside the sandbox (docs/design.md section 12): one
// long-lived interpreter per context (the box's own python3, node or bash,
// no Jupyter) that keeps its variables, imports and functions between
// cells. Each interpreter runs a small driver script (code_drivers.cpp)
// under its own reaper (spawn.h), with the agent's environment, in
// /workspace; cells go to it on fd 3 and its answers come back on fd 4,
// while its stdout and stderr are read at the same time (poll), so a big
// print never blocks it. One cell at a time per context: a second run while
// one is going gets CONTEXT_BUSY. A timeout or a cancel sends SIGINT to the
// interpreter's tree (KeyboardInterrupt, node's breakOnSigint, bash's trap)
// and keeps the context; an interpreter that is not back within kGrace is
// killed and the context forgotten, so the host replays its cells into a
// new one (the host keeps them: the agent knows only what runs now).
#pragma once

#include "agent/methods.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::agent {

// The drivers (code_drivers.cpp).
extern const char* const kPythonDriver;
extern const char* const kNodeDriver;
extern const char* const kBashDriver;

class CodeTable {
 public:
  explicit CodeTable(const AgentConfig& config);
  ~CodeTable();
  CodeTable(const CodeTable&) = delete;
  CodeTable& operator=(const CodeTable&) = delete;

  // {context, language}: starts its interpreter (an existing one stays).
  json create(const json& params);
  // {context, code, timeout_ms, create?, language?, replay?: [code]}: runs
  // a cell. With create, a context the agent does not have is started in
  // `language` and the replay cells run in it first, output discarded.
  // Without, an unknown context is CONTEXT_NOT_FOUND.
  json run(AgentRequest& request);
  json remove(const json& params);
  json list(const json& params);
  void kill_all();

  static constexpr std::size_t kMaxContexts = 16;
  static constexpr std::size_t kMaxImages = 8;
  static constexpr std::size_t kMaxImageBytes = 4 << 20;  // base64, all of a cell's images
  static constexpr std::size_t kMaxReplyBytes = 8 << 20;  // one reply line from a driver

 private:
  struct Context;
  struct Cell;
  std::shared_ptr<Context> start(const std::string& id, const std::string& language);
  // Runs one cell; fills the reply fields. Returns false when the
  // interpreter is gone (killed after the grace, or it exited).
  bool exchange(Context& c, const std::string& code, std::int64_t timeout_ms, AgentRequest* request, Cell& out);
  void forget(const std::string& id);

  const AgentConfig& config_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Context>> contexts_;
};

void register_code_methods(MethodTable& table, CodeTable& code);

}  // namespace agentbox::agent
