#include "agent/agent.h"

#include "agent/code_contexts.h"
#include "agent/file_paths.h"
#include "agent/files.h"
#include "agent/freeze.h"
#include "agent/processes.h"
#include "agent/session_queue.h"
#include "agent/sessions.h"
#include "agent/terminals.h"
#include "agent/watches.h"
#include "contract/agent_methods.h"
#include "os/thread_cache.h"
#include "rpc/framing.h"
#include "rpc/message.h"

#include <map>
#include <memory>
#include <mutex>
#include <unistd.h>

namespace agentbox::agent {

void AgentRequest::on_cancel(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (!cancelled_) {
      on_cancel_ = std::move(fn);
      return;
    }
  }
  fn();
}

void AgentRequest::cancel() {
  std::function<void()> fn;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_.exchange(true)) return;
    fn = std::move(on_cancel_);
  }
  if (fn) fn();
}

std::string param_string(const json& params, const char* name, const std::string& fallback) {
  if (!params.is_object() || !params.contains(name) || params[name].is_null()) return fallback;
  if (!params[name].is_string()) throw SandboxError(codes::kInvalidArguments, std::string(name) + " must be a string");
  return params[name].get<std::string>();
}

std::string require_string(const json& params, const char* name) {
  std::string value = param_string(params, name, "");
  if (value.empty()) throw SandboxError(codes::kInvalidArguments, std::string(name) + " is required");
  return value;
}

std::int64_t param_int(const json& params, const char* name, std::int64_t fallback) {
  if (!params.is_object() || !params.contains(name) || params[name].is_null()) return fallback;
  if (!params[name].is_number()) throw SandboxError(codes::kInvalidArguments, std::string(name) + " must be a number");
  return params[name].get<std::int64_t>();
}

std::map<std::string, std::string> param_env(const json& params) {
  std::map<std::string, std::string> env;
  if (!params.is_object() || !params.contains("env") || params["env"].is_null()) return env;
  if (!params["env"].is_object()) throw SandboxError(codes::kInvalidArguments, "env must be an object of strings");
  for (const auto& [key, value] : params["env"].items()) {
    if (!valid_env_name(key)) throw SandboxError(codes::kInvalidArguments, "env: '" + key + "' is not a variable name");
    if (!value.is_string()) throw SandboxError(codes::kInvalidArguments, "env." + key + " must be a string");
    env[key] = value.get<std::string>();
  }
  return env;
}

namespace {

// Serves requests until stdin closes. Each request runs on a thread of its
// own (an exec that waits on a command must not hold up a ping or another
// session), taken from a cache so that a request does not pay a clone.
class AgentServer {
 public:
  explicit AgentServer(const AgentConfig& config)
      : config_(config),
        processes_(io_, config_, [this](const std::string& name) { return sessions_->settled_context(name); }),
        terminals_(io_, config_, [this](const std::string& name) { return sessions_->settled_context(name); }),
        code_(config_),
        watches_(io_, [this](const std::string& name) { return sessions_->context(name); }),
        writer_(STDOUT_FILENO) {
    sessions_ = std::make_unique<Sessions>(config_, io_, processes_);
    register_session_methods(methods_, *sessions_);
    register_process_methods(methods_, processes_);
    register_terminal_methods(methods_, terminals_);
    register_watch_methods(methods_, watches_);
    register_code_methods(methods_, code_);
    register_freeze_methods(methods_);
    register_file_methods(methods_, [this](const std::string& name) { return sessions_->context(name); }, config_);
    methods_[contract::methods::kHello] = [](AgentRequest&) {
      return json{{"pid", getpid()}, {"uid", getuid()}, {"version", 1}};
    };
    methods_[contract::methods::kStatus] = [this](AgentRequest&) {
      return json{{"sessions", sessions_->names()}, {"processes", processes_.background_ids()}};
    };
  }

  int run() {
    rpc::LineReader reader(STDIN_FILENO, 16 << 20);
    while (auto line = reader.next()) {
      if (line->oversized) continue;
      auto parsed = rpc::parse_message(line->text);
      if (auto* invalid = std::get_if<rpc::Invalid>(&parsed)) {
        writer_.write_line(rpc::serialize(rpc::make_error(invalid->id, invalid->error)));
        continue;
      }
      auto& message = std::get<rpc::Message>(parsed);
      if (auto* request = std::get_if<rpc::Request>(&message)) {
        dispatch(*request, line->text.size());
      } else if (auto* note = std::get_if<rpc::Notification>(&message)) {
        if (note->method == contract::notifications::kCancel && note->params.is_object()) cancel(note->params.value("id", json()));
      }
    }
    // The server closed the pipe: end everything this sandbox runs.
    sessions_->kill_all();
    processes_.kill_all();
    terminals_.kill_all();
    code_.kill_all();
    return 0;
  }

 private:
  // Bounded, non-blocking file operations on small requests are served on
  // the reader thread: a hand-off to another thread would cost more than the
  // operation (docs/files.md, "Performance"). Everything that can wait on a
  // command, walk a tree or move megabytes runs on a thread of its own.
  static constexpr std::size_t kQuickLineBytes = 1 << 20;

  static bool quick(const rpc::Request& request, std::size_t line_bytes) {
    if (line_bytes > kQuickLineBytes) return false;
    return request.method == contract::methods::kHello || request.method == contract::methods::kStatus || contract::quick_file_call(request.method, request.params);
  }

  void dispatch(rpc::Request& request, std::size_t line_bytes) {
    auto it = methods_.find(request.method);
    if (it == methods_.end()) {
      rpc::Error error{rpc::ErrorCode::MethodNotFound, "unknown agent method " + request.method, nullptr};
      writer_.write_line(rpc::serialize(rpc::make_error(request.id, error)));
      return;
    }
    json id = request.id;
    // Calls naming a session take their place in its line here, as they are
    // read; a quick call is served here only when its session has no line.
    std::string session = ordering_session(request.method, request.params);
    bool serve_here = quick(request, line_bytes) && (session.empty() || order_.idle(session));
    auto call = std::make_shared<AgentRequest>(id, std::move(request.params), [this, id](const std::string& method, json params) {
      params["request"] = id;
      writer_.write_line(rpc::serialize(rpc::make_notification(method, params)));
    });
    if (serve_here) {
      writer_.write_line(rpc::serialize(serve(*call, it->second)));
      close_files_after_reply();
      return;
    }
    {
      std::lock_guard lock(mutex_);
      active_[id.dump()] = call;
    }
    std::shared_ptr<SessionQueue::Place> place;
    if (!session.empty()) place = order_.enter(session);
    threads_.run([this, call, method = it->second, place = std::move(place)]() mutable {
      json reply = place ? serve_in_turn(*call, method, *place) : serve(*call, method);
      place.reset();  // the next call of the session starts
      {
        std::lock_guard lock(mutex_);
        active_.erase(call->id().dump());
      }
      writer_.write_line(rpc::serialize(reply));
      close_files_after_reply();
    });
  }

  static json serve(AgentRequest& call, const AgentMethod& method) {
    json reply;
    try {
      reply = rpc::make_result(call.id(), method(call));
    } catch (const SandboxError& e) {
      reply = rpc::make_error(call.id(), rpc::Error{static_cast<rpc::ErrorCode>(contract::kAgentErrorCode), e.what(),
                                                    json{{"code", e.code()}}});
    } catch (const std::exception& e) {
      reply = rpc::make_error(call.id(), rpc::Error{static_cast<rpc::ErrorCode>(contract::kAgentErrorCode), e.what(),
                                                    json{{"code", codes::kInternal}}});
    }
    return reply;
  }

  static json serve_in_turn(AgentRequest& call, const AgentMethod& method, SessionQueue::Place& place) {
    try {
      place.wait(call);
    } catch (const SandboxError& e) {
      return rpc::make_error(call.id(), rpc::Error{static_cast<rpc::ErrorCode>(contract::kAgentErrorCode), e.what(),
                                                   json{{"code", e.code()}}});
    }
    return serve(call, method);
  }

  void cancel(const json& id) {
    std::shared_ptr<AgentRequest> call;
    {
      std::lock_guard lock(mutex_);
      auto it = active_.find(id.dump());
      if (it != active_.end()) call = it->second;
    }
    if (call) call->cancel();
  }

  AgentConfig config_;
  IoLoop io_;
  ProcessTable processes_;
  TerminalTable terminals_;
  CodeTable code_;
  WatchTable watches_;
  std::unique_ptr<Sessions> sessions_;
  MethodTable methods_;
  rpc::LineWriter writer_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<AgentRequest>> active_;
  SessionQueue order_;
  os::ThreadCache threads_;
};

}  // namespace

int serve(const AgentConfig& config) {
  AgentServer server(config);
  return server.run();
}

}  // namespace agentbox::agent
