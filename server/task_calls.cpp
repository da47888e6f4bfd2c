// Tool calls that run as MCP tasks (docs/protocol.md, "Tasks"): the 2025-11-25
// kind, which the client asks for with `task`, and the 2026 extension's,
// which the server decides on: a call of a tool that may run as a task, from
// a client whose request declares the extension, is answered as usual when
// it ends within kTaskAfter, and otherwise at kTaskAfter with a
// CreateTaskResult, the tool running on as that task.
#include "server/mcp_server.h"

#include "contract/errors.h"
#include "tools/sandbox_call.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

namespace agentbox::server {

namespace {

constexpr std::chrono::milliseconds kTaskAfter{1000};

// What a tool running as a task sees: its call was answered with the
// CreateTaskResult, so progress goes out on the original progressToken
// (valid for the task's life), at most once a second, and cancellation is
// the task's (tasks/cancel).
class TaskCallContext : public tools::CallContext {
 public:
  TaskCallContext(Dispatcher& dispatcher, TaskStore& tasks, std::string id, std::string conversation,
                  std::optional<json> token)
      : dispatcher_(dispatcher), tasks_(tasks), id_(std::move(id)), conversation_(std::move(conversation)),
        token_(std::move(token)) {}
  const std::string& conversation() const override { return conversation_; }
  void progress(double done, std::optional<double> total, const std::string& message) override {
    if (!token_) return;
    std::lock_guard lock(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (sent_ > 0 && now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    // Values must increase: the count of reports sent, or done when larger.
    double value = std::max(done, static_cast<double>(++sent_));
    if (value <= last_value_) value = last_value_ + 1;
    last_value_ = value;
    json params = {{"progressToken", *token_}, {"progress", value}, {"message", message},
                   {"_meta", {{"io.modelcontextprotocol/related-task", {{"taskId", id_}}}}}};
    if (total && *total >= value) params["total"] = *total;
    dispatcher_.notify("notifications/progress", params);
  }
  bool cancelled() const override { return tasks_.cancelled(id_); }
  void on_cancel(std::function<void()> fn) override { tasks_.on_cancel(id_, std::move(fn)); }
  void release_order() override {}

 private:
  Dispatcher& dispatcher_;
  TaskStore& tasks_;
  std::string id_, conversation_;
  std::optional<json> token_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_;
  int sent_ = 0;
  double last_value_ = 0;
};

// A 2026 call that becomes a task if it outlasts kTaskAfter. Until then it
// is the call (its progress, its notifications/cancelled); once a task, no
// progress (the extension has none for tasks) and tasks/cancel cancels it.
class DeferredCallContext : public tools::CallContext, public std::enable_shared_from_this<DeferredCallContext> {
 public:
  DeferredCallContext(std::shared_ptr<Call> call, TaskStore& tasks, std::string conversation)
      : call_(std::move(call)), tasks_(tasks), conversation_(std::move(conversation)) {}

  // Hooks the call's cancellation, and the timer (on a reused thread) that
  // turns the call into a task.
  void start() {
    std::weak_ptr<DeferredCallContext> weak = weak_from_this();
    call_->on_cancel([weak] {
      if (auto self = weak.lock()) self->fire();
    });
    tools::run_blocking([self = shared_from_this()] {
      {
        std::unique_lock lock(self->mutex_);
        if (self->ended_.wait_for(lock, kTaskAfter, [&] { return self->state_ != State::Pending; })) return;
      }
      self->become_task();
    });
  }

  const std::string& conversation() const override { return conversation_; }
  void progress(double done, std::optional<double> total, const std::string& message) override {
    std::lock_guard lock(mutex_);
    if (state_ == State::Pending) call_->progress(done, total, message);
  }
  bool cancelled() const override {
    std::lock_guard lock(mutex_);
    return fired_;
  }
  void on_cancel(std::function<void()> fn) override {
    {
      std::lock_guard lock(mutex_);
      if (!fired_) {
        hooks_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }
  void release_order() override { call_->release_order(); }

  // The tool's answer: to the call while it waits, else to the task.
  void answer(json result, bool is_error) {
    std::string task;
    {
      std::lock_guard lock(mutex_);
      if (state_ == State::Pending) state_ = State::Answered;
      task = task_id_;
    }
    ended_.notify_all();
    if (task.empty()) call_->reply(std::move(result));
    else tasks_.finish(task, std::move(result), is_error);
  }

 private:
  enum class State { Pending, Answered, Task };

  void become_task() {
    json created;
    {
      std::lock_guard lock(mutex_);
      if (state_ != State::Pending || fired_) return;
      created = tasks_.create(std::nullopt, task_id_, true);
      state_ = State::Task;
    }
    std::weak_ptr<DeferredCallContext> weak = weak_from_this();
    tasks_.on_cancel(task_id_, [weak] {
      if (auto self = weak.lock()) self->fire();
    });
    spdlog::info("tools/call {} outlasted {} ms and runs on as task {}", call_->params().value("name", ""),
                 kTaskAfter.count(), task_id_);
    created["resultType"] = "task";
    call_->reply(std::move(created));
  }

  void fire() {
    std::vector<std::function<void()>> hooks;
    {
      std::lock_guard lock(mutex_);
      if (fired_) return;
      fired_ = true;
      hooks.swap(hooks_);
    }
    for (auto& hook : hooks) hook();
  }

  std::shared_ptr<Call> call_;
  TaskStore& tasks_;
  std::string conversation_;
  mutable std::mutex mutex_;
  std::condition_variable ended_;
  State state_ = State::Pending;
  std::string task_id_;
  bool fired_ = false;
  std::vector<std::function<void()>> hooks_;
};

}  // namespace

void McpServer::call_tool_as_task(const std::shared_ptr<Call>& call, const tools::Registry::Entry& tool,
                                  const std::string& name, const json& arguments, const std::string& conversation) {
  if (!may_run_as_task(tool))
    throw ProtocolError(rpc::ErrorCode::MethodNotFound,
                        "tool " + name + " does not run as a task (its execution.taskSupport is forbidden); call it without task",
                        json{{"field", "params.task"}});
  const json& task_params = call->params()["task"];
  std::optional<std::int64_t> ttl;
  if (task_params.contains("ttl") && task_params["ttl"].is_number()) ttl = task_params["ttl"].get<std::int64_t>();
  std::string id;
  json task = tasks_.create(ttl, id);
  spdlog::info("tools/call {} runs as task {}", name, id);
  call->reply(json{{"task", task},
                   {"_meta", {{"io.modelcontextprotocol/model-immediate-response",
                               name + " runs as task " + id + "; its result comes when the task completes"}}}});
  auto context = std::make_shared<TaskCallContext>(dispatcher_, tasks_, id, conversation, call->meta().progress_token);
  auto store = &tasks_;
  tools::ToolReply reply(name, [store, id](tools::ToolResult result) {
    bool is_error = result.is_error;
    store->finish(id, call_tool_result(std::move(result)), is_error);
  });
  try {
    registry_.function(tool)(arguments, context, reply);
  } catch (const std::exception& e) {
    spdlog::error("tool {} failed: {}", name, e.what());
    reply(tools::ToolResult::error(codes::kInternal, std::string("the tool failed: ") + e.what()));
  }
}


bool McpServer::may_run_as_task(const tools::Registry::Entry& tool) const {
  const json& definition = registry_.definition(tool);
  std::string support = definition.contains("execution") ? definition["execution"].value("taskSupport", "forbidden") : "forbidden";
  return support == "optional" || support == "required";
}

void McpServer::call_tool_deferred(const std::shared_ptr<Call>& call, const tools::Registry::Entry& tool,
                                   const std::string& name, const json& arguments, const std::string& conversation) {
  auto context = std::make_shared<DeferredCallContext>(call, tasks_, conversation);
  context->start();
  tools::ToolReply reply(name, [context](tools::ToolResult result) {
    bool is_error = result.is_error;
    context->answer(call_tool_result(std::move(result)), is_error);
  });
  try {
    registry_.function(tool)(arguments, context, reply);
  } catch (const std::exception& e) {
    spdlog::error("tool {} failed: {}", name, e.what());
    reply(tools::ToolResult::error(codes::kInternal, std::string("the tool failed: ") + e.what()));
  }
}

}  // namespace agentbox::server
