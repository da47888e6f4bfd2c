// The agent's method table: one map from JSON-RPC method name (contract/agent_methods.h) to handler,
// filled by one register_*_methods() per family (sessions and exec,
// background processes, file operations in files.h).
// A handler runs on its own thread, returns the result object, and throws
// SandboxError for failures; the code travels as error.data.code.
#pragma once

#include <chrono>

#include "contract/agent_methods.h"
#include "contract/errors.h"
#include "contract/limits.h"
#include "agent/io.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace agentbox::agent {

using json = nlohmann::json;

struct AgentConfig {
  std::size_t inline_output_chars = contract::kInlineOutputChars;
  std::size_t process_head_bytes = contract::kProcessHeadBytes;
  std::size_t process_tail_bytes = contract::kProcessTailBytes;
  std::vector<std::string> environment;  // the agent's own, passed to commands
  // A session shell idle this long with no process of its own left exits;
  // the next exec starts a fresh one from the saved state (docs/sandbox.md,
  // "Idle shells"). 0 = shells live as long as their session.
  std::chrono::milliseconds shell_idle{60'000};
};

// One request being served. Copies are not made: handlers get a reference.
class AgentRequest {
 public:
  using Notify = std::function<void(const std::string& method, json params)>;
  AgentRequest(json id, json params, Notify notify)
      : id_(std::move(id)), params_(std::move(params)), notify_(std::move(notify)) {}

  const json& id() const { return id_; }
  const json& params() const { return params_; }
  void notify(const std::string& method, json params) const { notify_(method, std::move(params)); }

  bool cancelled() const { return cancelled_.load(); }
  // fn runs once, on cancel() (at once if already cancelled). Used to wake a
  // handler that waits on a command.
  void on_cancel(std::function<void()> fn);
  void cancel();

 private:
  json id_;
  json params_;
  Notify notify_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::function<void()> on_cancel_;
};

using AgentMethod = std::function<json(AgentRequest&)>;
using MethodTable = std::map<std::string, AgentMethod>;

class Sessions;
class ProcessTable;

void register_session_methods(MethodTable& table, Sessions& sessions);
void register_process_methods(MethodTable& table, ProcessTable& processes);

// Parameter helpers: a missing or mistyped field is INVALID_ARGUMENT naming it.
std::string param_string(const json& params, const char* name, const std::string& fallback);
std::string require_string(const json& params, const char* name);
std::int64_t param_int(const json& params, const char* name, std::int64_t fallback);
std::map<std::string, std::string> param_env(const json& params);

}  // namespace agentbox::agent
