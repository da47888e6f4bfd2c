// MCP tasks of the 2025-11-25 revision (experimental there): a tools/call
// that carries `task` is answered at once with a CreateTaskResult and runs
// on; tasks/get polls it, tasks/result waits for and returns the tool's
// result, tasks/cancel stops it (the tool's own cancellation: an exec's
// command tree is killed), tasks/list pages them. A task is kept `ttl` ms
// from its creation (asked by the client, clamped to 1 s .. 24 h; 1 h when
// not asked); past it a finished task is forgotten and a running one is
// cancelled first. Tasks live in the server's memory: a server restart
// forgets them, as it forgets calls in flight (docs/protocol.md, "Tasks").
#pragma once

#include "server/dispatcher.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace agentbox::server {

using json = nlohmann::json;

class TaskStore {
 public:
  static constexpr std::int64_t kDefaultTtlMs = 60 * 60 * 1000;
  static constexpr std::int64_t kMinTtlMs = 1000;
  static constexpr std::int64_t kMaxTtlMs = 24 * 60 * 60 * 1000;
  static constexpr std::int64_t kPollIntervalMs = 1000;
  static constexpr std::size_t kMaxTasks = 1000;  // the oldest finished one goes first
  static constexpr std::size_t kPageSize = 100;

  // notify is told of each change: a 2025 task's Task object (for
  // notifications/tasks/status), or a 2026 task's detailed Task (for the
  // subscriptions/listen streams that name it; modern true).
  using Notify = std::function<void(const std::string& id, const json& task, bool modern)>;
  explicit TaskStore(Notify notify) : notify_(std::move(notify)) {}

  // A new working task; its Task object (for the CreateTaskResult). A
  // modern task is one of the 2026 tasks extension: its fields are ttlMs and
  // pollIntervalMs, tasks/get carries its result, tasks/list does not show it.
  json create(std::optional<std::int64_t> ttl_ms, std::string& id, bool modern = false);
  // The tool's answer: completed, or failed when it is an error result; a
  // cancelled task stays cancelled but keeps the result for tasks/result.
  void finish(const std::string& id, json call_tool_result, bool is_error);
  bool cancelled(const std::string& id);
  // fn runs on tasks/cancel (at once if already cancelled).
  void on_cancel(const std::string& id, std::function<void()> fn);

  // The methods; each throws ProtocolError(-32602) for an unknown or expired id.
  json get(const json& params);
  void result(const std::shared_ptr<Call>& call);  // replies now or when the task ends
  json cancel(const json& params);
  json list(const json& params);
  // The 2026 extension's methods: tasks/get with the result or error inline,
  // tasks/update (acknowledged; these tools never ask for input) and
  // tasks/cancel (acknowledged, also for a task that has ended). Throw
  // ProtocolError(-32602) for an unknown or expired id.
  json get_detailed(const json& params);
  json update(const json& params);
  json cancel_acknowledged(const json& params);
  bool known_modern(const std::string& id);

 private:
  struct Task {
    std::string id;
    std::string status = "working";
    std::string message;
    bool modern = false;
    std::int64_t created_ms = 0, updated_ms = 0, ttl_ms = kDefaultTtlMs;
    std::optional<json> result;
    std::vector<std::shared_ptr<Call>> waiting;  // tasks/result calls
    std::vector<std::function<void()>> cancel_hooks;
  };
  // The Task object of t's era; detailed: with a 2026 task's result inline.
  json describe(const Task& t, bool detailed = false) const;
  // The task the params name, of the era asked (a 2025 id is unknown to the
  // 2026 methods and the other way round).
  Task& find(const json& params, const char* method, bool modern = false);
  // Marks a running task cancelled and collects its hooks; the status to notify.
  json cancel_locked(Task& t, std::vector<std::function<void()>>& hooks);
  // Forgets tasks past their ttl (cancelling running ones); returns hooks
  // and calls to answer outside the lock.
  void expire_locked(std::int64_t now, std::vector<std::function<void()>>& hooks);

  Notify notify_;
  std::mutex mutex_;
  std::map<std::string, Task> tasks_;
  std::deque<std::string> order_;      // creation order, for tasks/list and eviction
  std::set<std::string> expired_;      // ids forgotten at their ttl (bounded), for the message
  std::deque<std::string> expired_order_;
  std::mt19937_64 random_{std::random_device{}()};
};

}  // namespace agentbox::server
