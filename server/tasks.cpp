#include "server/tasks.h"

#include "server/protocol.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace agentbox::server {

namespace {

constexpr const char* kRelatedTask = "io.modelcontextprotocol/related-task";

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string iso8601(std::int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

bool terminal(const std::string& status) { return status == "completed" || status == "failed" || status == "cancelled"; }

}  // namespace

json TaskStore::describe(const Task& t, bool detailed) const {
  json j = {{"taskId", t.id},
            {"status", t.status},
            {"createdAt", iso8601(t.created_ms)},
            {"lastUpdatedAt", iso8601(t.updated_ms)},
            {t.modern ? "ttlMs" : "ttl", t.ttl_ms}};
  if (!terminal(t.status)) j[t.modern ? "pollIntervalMs" : "pollInterval"] = kPollIntervalMs;
  if (!t.message.empty()) j["statusMessage"] = t.message;
  // A 2026 task's result travels in it: completed even when the tool
  // answered with an error result (failed is for JSON-RPC errors only).
  if (detailed && t.modern && t.status == "completed" && t.result) j["result"] = *t.result;
  return j;
}

void TaskStore::expire_locked(std::int64_t now, std::vector<std::function<void()>>& hooks) {
  for (auto it = order_.begin(); it != order_.end();) {
    auto t = tasks_.find(*it);
    if (t == tasks_.end()) {
      it = order_.erase(it);
      continue;
    }
    if (t->second.created_ms + t->second.ttl_ms > now) {
      ++it;
      continue;
    }
    // Past its ttl: work still running is stopped; waiting results get an error.
    for (auto& hook : t->second.cancel_hooks) hooks.push_back(std::move(hook));
    for (auto& call : t->second.waiting) {
      hooks.push_back([call, id = t->first] {
        call->reply_error({rpc::ErrorCode::InvalidParams, "task " + id + " has expired (its ttl passed)", nullptr});
      });
    }
    if (expired_.insert(t->first).second) expired_order_.push_back(t->first);
    if (expired_order_.size() > kMaxTasks) {
      expired_.erase(expired_order_.front());
      expired_order_.pop_front();
    }
    tasks_.erase(t);
    it = order_.erase(it);
  }
}

json TaskStore::create(std::optional<std::int64_t> ttl_ms, std::string& id, bool modern) {
  char buf[40];
  std::uint64_t a = random_(), b = random_();
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)), static_cast<unsigned long long>(b & 0xffffffffffffULL));
  id = buf;
  std::vector<std::function<void()>> hooks;
  json task;
  {
    std::lock_guard lock(mutex_);
    std::int64_t now = now_ms();
    expire_locked(now, hooks);
    // Over the bound the oldest finished task goes (running ones stay).
    if (tasks_.size() >= kMaxTasks) {
      for (auto it = order_.begin(); it != order_.end(); ++it) {
        auto t = tasks_.find(*it);
        if (t != tasks_.end() && terminal(t->second.status) && t->second.waiting.empty()) {
          tasks_.erase(t);
          order_.erase(it);
          break;
        }
      }
    }
    Task t;
    t.id = id;
    t.modern = modern;
    t.created_ms = t.updated_ms = now;
    t.ttl_ms = std::clamp(ttl_ms.value_or(kDefaultTtlMs), kMinTtlMs, kMaxTtlMs);
    t.message = "running";
    task = describe(t);
    tasks_.emplace(id, std::move(t));
    order_.push_back(id);
  }
  for (auto& hook : hooks) hook();
  return task;
}

void TaskStore::finish(const std::string& id, json result, bool is_error) {
  std::vector<std::shared_ptr<Call>> waiting;
  json status;
  bool modern = false;
  {
    std::lock_guard lock(mutex_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return;  // expired meanwhile
    Task& t = it->second;
    modern = t.modern;
    if (!result.contains("_meta") || !result["_meta"].is_object()) result["_meta"] = json::object();
    result["_meta"][kRelatedTask] = {{"taskId", id}};
    if (t.modern) result["resultType"] = "complete";  // inline in a 2026 Task: the CallToolResult as the call gives it
    t.result = std::move(result);
    t.cancel_hooks.clear();
    if (t.status != "cancelled") {
      is_error = is_error && !t.modern;
      t.status = is_error ? "failed" : "completed";
      t.message = is_error ? "the tool answered with an error result; tasks/result has it" : "";
      t.updated_ms = now_ms();
      status = describe(t, true);
    }
    waiting.swap(t.waiting);
    for (auto& call : waiting) call->reply(*t.result);
  }
  if (!status.is_null() && notify_) notify_(id, status, modern);
}

bool TaskStore::cancelled(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = tasks_.find(id);
  return it != tasks_.end() && it->second.status == "cancelled";
}

void TaskStore::on_cancel(const std::string& id, std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    auto it = tasks_.find(id);
    if (it != tasks_.end() && it->second.status != "cancelled") {
      if (!terminal(it->second.status)) it->second.cancel_hooks.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

TaskStore::Task& TaskStore::find(const json& params, const char* method, bool modern) {
  ParamReader reader(params, "params");
  std::string id = reader.required_string("taskId");
  auto it = tasks_.find(id);
  if (it != tasks_.end() && it->second.modern == modern) return it->second;
  if (modern)
    throw ProtocolError(rpc::ErrorCode::InvalidParams, std::string(method) + ": Task not found (" + id +
                                                           (expired_.count(id) ? ": its ttl passed)" : ")"),
                        json{{"field", "params.taskId"}});
  if (expired_.count(id))
    throw ProtocolError(rpc::ErrorCode::InvalidParams, std::string(method) + ": task " + id + " has expired (its ttl passed)");
  throw ProtocolError(rpc::ErrorCode::InvalidParams, std::string(method) + ": no task " + id + " (tasks/list shows them)",
                      json{{"field", "params.taskId"}});
}

json TaskStore::get(const json& params) {
  std::vector<std::function<void()>> hooks;
  json out;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    out = describe(find(params, "tasks/get"));
  }
  for (auto& hook : hooks) hook();
  return out;
}

void TaskStore::result(const std::shared_ptr<Call>& call) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    Task& t = find(call->params(), "tasks/result");
    if (t.result) call->reply(*t.result);
    else t.waiting.push_back(call);  // answered by finish() or at expiry
  }
  for (auto& hook : hooks) hook();
}

json TaskStore::cancel(const json& params) {
  std::vector<std::function<void()>> hooks;
  json out, status;
  std::string id;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    Task& t = find(params, "tasks/cancel");
    if (terminal(t.status))
      throw ProtocolError(rpc::ErrorCode::InvalidParams, "tasks/cancel: task " + t.id + " has already ended (" + t.status + ")");
    status = cancel_locked(t, hooks);
    out = status;
    id = t.id;
  }
  for (auto& hook : hooks) hook();
  if (notify_) notify_(id, status, false);
  return out;
}

json TaskStore::cancel_locked(Task& t, std::vector<std::function<void()>>& hooks) {
  t.status = "cancelled";
  t.message = "cancelled by request; the work was stopped";
  t.updated_ms = now_ms();
  for (auto& hook : t.cancel_hooks) hooks.push_back(std::move(hook));
  t.cancel_hooks.clear();
  return describe(t, true);
}

json TaskStore::get_detailed(const json& params) {
  std::vector<std::function<void()>> hooks;
  json out;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    out = describe(find(params, "tasks/get", true), true);
  }
  for (auto& hook : hooks) hook();
  return out;
}

json TaskStore::update(const json& params) {
  std::lock_guard lock(mutex_);
  find(params, "tasks/update", true);  // no input is ever asked for: responses are ignored, as the extension says
  return json::object();
}

json TaskStore::cancel_acknowledged(const json& params) {
  std::vector<std::function<void()>> hooks;
  json status;
  std::string id;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    Task& t = find(params, "tasks/cancel", true);
    // Cancelling an ended task is acknowledged and changes nothing.
    if (!terminal(t.status)) {
      status = cancel_locked(t, hooks);
      id = t.id;
    }
  }
  for (auto& hook : hooks) hook();
  if (!status.is_null() && notify_) notify_(id, status, true);
  return json::object();
}

bool TaskStore::known_modern(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = tasks_.find(id);
  return it != tasks_.end() && it->second.modern;
}

json TaskStore::list(const json& params) {
  ParamReader reader(params, "params");
  std::vector<std::function<void()>> hooks;
  json out;
  {
    std::lock_guard lock(mutex_);
    expire_locked(now_ms(), hooks);
    // Only 2025 tasks: the 2026 extension has no list (one caller's task
    // ids are not shown to another).
    std::vector<const Task*> listed;
    for (const auto& id : order_)
      if (!tasks_.at(id).modern) listed.push_back(&tasks_.at(id));
    std::size_t start = 0;
    if (auto cursor = reader.optional_string("cursor")) {
      auto at = std::find_if(listed.begin(), listed.end(), [&](const Task* t) { return t->id == *cursor; });
      if (at == listed.end()) reader.fail("cursor", "unknown cursor (pass a nextCursor of tasks/list)");
      start = static_cast<std::size_t>(at - listed.begin()) + 1;
    }
    json page = json::array();
    std::size_t i = start;
    for (; i < listed.size() && page.size() < kPageSize; ++i) page.push_back(describe(*listed[i]));
    out = {{"tasks", std::move(page)}};
    if (i < listed.size()) out["nextCursor"] = listed[i - 1]->id;
  }
  for (auto& hook : hooks) hook();
  return out;
}

}  // namespace agentbox::server
