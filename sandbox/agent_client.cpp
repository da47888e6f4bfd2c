#include "sandbox/agent_client.h"

#include "os/errno_text.h"
#include "rpc/framing.h"
#include "rpc/message.h"

#include <spdlog/spdlog.h>

#include <future>
#include <sys/ioctl.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace {

constexpr std::size_t kMaxAgentLine = 64 << 20;
constexpr std::size_t kStderrTailLines = 20;

}  // namespace

std::string explain_start_failure(const std::string& err) {
  auto has = [&err](const char* text) { return err.find(text) != std::string::npos; };
  if (has("No such file or directory") && has("bwrap"))
    return "bubblewrap (bwrap) is not installed; install the 'bubblewrap' package";
  if (has("setting up uid map") || has("Creating new namespace failed") || has("No permissions to create new namespace"))
    return "the kernel refused to create a user namespace for the sandbox. Enable unprivileged user namespaces "
           "(sysctl kernel.unprivileged_userns_clone=1 on Debian; on Ubuntu 24.04 allow bwrap in AppArmor or set "
           "kernel.apparmor_restrict_unprivileged_userns=0; in a container, run it with user namespaces allowed, "
           "e.g. docker --security-opt seccomp=unconfined). `agentbox doctor` checks this. bwrap said: " + err;
  if (has("Can't find source path") || has("Permission denied"))
    return "bwrap could not bind a directory into the sandbox (the sandbox user cannot reach it; "
           "check the permissions of the state directory and of the agentbox binary). bwrap said: " + err;
  if (err.empty()) return "the sandbox exited before its agent answered (no message from bwrap)";
  return "the sandbox did not start. bwrap said: " + err;
}

std::shared_ptr<AgentClient> AgentClient::attach(StartFn start, std::string name) {
  std::shared_ptr<AgentClient> client(new AgentClient);
  client->name_ = std::move(name);
  client->reader_ = std::thread([client = client.get(), start = std::move(start)]() mutable {
    client->reader_main(std::move(start));
  });
  std::unique_lock lock(client->mutex_);
  client->changed_.wait(lock, [&] { return client->launched_ || client->launch_error_; });
  if (client->launch_error_) std::rethrow_exception(client->launch_error_);
  return client;
}

void AgentClient::await_hello(std::chrono::milliseconds hello_timeout) {
  watchdog_ = std::thread([this] { watchdog_main(); });
  try {
    call("hello", json::object(), hello_timeout);
  } catch (const SandboxError& e) {
    stop();
    std::string tail;
    {
      std::lock_guard lock(mutex_);
      for (const auto& line : stderr_tail_) tail += (tail.empty() ? "" : "; ") + line;
    }
    throw SandboxError(codes::kSandboxStartFailed, explain_start_failure(tail.empty() ? e.what() : tail));
  }
}

void AgentClient::reader_main(StartFn start) {
  LaunchedProcess process;
  try {
    process = start();
  } catch (...) {
    std::lock_guard lock(mutex_);
    launch_error_ = std::current_exception();
    changed_.notify_all();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    pid_ = process.pid;
    to_agent_ = process.stdin_fd;
    to_agent_capacity_ = process.stdin_capacity;
    from_agent_ = process.stdout_fd;
    stderr_fd_ = process.stderr_fd;
    launched_ = true;
    changed_.notify_all();
  }
  stderr_reader_ = std::thread([this] { stderr_main(); });

  rpc::LineReader reader(from_agent_, kMaxAgentLine);
  while (auto line = reader.next()) {
    std::string violation = line->oversized ? "a " + std::to_string(line->bytes) + " byte line, over the " +
                                                  std::to_string(kMaxAgentLine) + " byte limit"
                                            : handle_line(line->text);
    if (!violation.empty()) reject(violation);
    if (rejected_) break;  // nothing more from this agent is read: it is being killed
  }
  int status = wait_launched(pid_);
  if (stderr_reader_.joinable()) stderr_reader_.join();
  std::string reason;
  {
    std::lock_guard lock(mutex_);
    dead_ = true;
    reason = describe_wait_status(status);
    if (!stderr_tail_.empty()) reason += "; last message: " + stderr_tail_.back();
    death_reason_ = !rejection_.empty() ? "the sandbox was stopped because its agent sent a malformed message: " + rejection_
                    : stopping_       ? "it was stopped by the server"
                                      : "the sandbox's agent exited unexpectedly (" + reason + ")";
    changed_.notify_all();
  }
  if (!stopping_ && rejection_.empty()) spdlog::warn("sandbox {}: {}", name_, death_reason_);
  fail_all(codes::kSandboxFailed, death_reason_ + "; the sandbox will be restarted on the next call");
}

void AgentClient::stderr_main() {
  rpc::LineReader reader(stderr_fd_, 64 * 1024);
  while (auto line = reader.next()) {
    if (line->oversized) continue;
    spdlog::info("sandbox {}: {}", name_, line->text);
    std::lock_guard lock(mutex_);
    stderr_tail_.push_back(line->text);
    if (stderr_tail_.size() > kStderrTailLines) stderr_tail_.erase(stderr_tail_.begin());
  }
  close(stderr_fd_);
}

// Everything on this pipe is written by code the sandbox controls (the agent
// runs there; docs/sandbox.md, "The wall between host and box"): a line that
// is not exactly what the agent sends is a violation, answered by ending
// this sandbox (reject), never by an exception on this thread. Ids must be
// ones this client sent; one that is sent but no longer pending (timed out,
// cancelled) is a race, not a forgery, and is dropped.
std::string AgentClient::handle_line(const std::string& text) {
  auto parsed = rpc::parse_message(text);
  if (auto* invalid = std::get_if<rpc::Invalid>(&parsed)) return "unreadable line (" + invalid->error.message + ")";
  auto& message = std::get<rpc::Message>(parsed);
  if (auto* response = std::get_if<rpc::Response>(&message)) {
    std::uint64_t id = 0;
    if (!issued_id(response->id, id)) return "a reply to request " + response->id.dump() + ", which was never sent";
    Outcome outcome;
    if (response->error) {
      const json& data = response->error->data;
      if (!data.is_null() && (!data.is_object() || (data.contains("code") && !data["code"].is_string())))
        return "an error reply whose data is not {\"code\": string}";
      std::string code = data.is_object() ? data.value("code", codes::kInternal) : codes::kInternal;
      outcome.error = SandboxError(code, response->error->message);
    } else {
      if (!response->result->is_object()) return "a result that is not an object";
      outcome.result = std::move(*response->result);
    }
    deliver(id, std::move(outcome));
    return {};
  }
  auto* note = std::get_if<rpc::Notification>(&message);
  if (!note) return "a request (the agent only answers)";
  // The agent's one notification: a chunk of a command's output.
  const json& p = note->params;
  if (note->method != "output" || !p.is_object() || !p.contains("stream") || !p["stream"].is_string() ||
      !p.contains("data") || !p["data"].is_string() || !p.contains("bytes") || !p["bytes"].is_number())
    return "a notification that is not {\"output\": {stream, data, bytes, request}}";
  std::uint64_t id = 0;
  if (!p.contains("request") || !issued_id(p["request"], id)) return "a notification for no request this client sent";
  NoteSink sink;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(id);
    if (it != pending_.end()) sink = it->second.notes;
  }
  if (!sink) return {};
  try {
    sink(note->method, note->params);
  } catch (const std::exception& e) {
    return "a " + note->method + " notification its reader could not use (" + e.what() + ")";
  }
  return {};
}

bool AgentClient::issued_id(const json& id, std::uint64_t& out) const {
  if (!id.is_number_unsigned()) return false;
  out = id.get<std::uint64_t>();
  std::lock_guard lock(mutex_);
  return out >= 1 && out < next_id_;
}

void AgentClient::reject(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (dead_ || stopping_ || !rejection_.empty()) return;
    rejection_ = why;
    rejected_ = true;
  }
  spdlog::error("sandbox {}: its agent sent a malformed message ({}); stopping the sandbox, it will be restarted "
                "on the next call",
                name_, why);
  kill_launched(pid_);
}

void AgentClient::run_callback(Callback& callback, Outcome outcome) {
  // A callback reads the agent's result (a tool's formatter): one that
  // throws on it was handed something malformed.
  try {
    callback(std::move(outcome));
  } catch (const std::exception& e) {
    reject(std::string("a result its reader could not use (") + e.what() + ")");
  }
}

void AgentClient::deliver(std::uint64_t id, Outcome outcome) {
  Callback callback;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // timed out already
    callback = std::move(it->second.callback);
    pending_.erase(it);
  }
  run_callback(callback, std::move(outcome));
}

bool AgentClient::register_pending(std::uint64_t id, Callback& callback, NoteSink notes,
                                   std::chrono::milliseconds timeout, std::string* refusal) {
  std::lock_guard lock(mutex_);
  if (dead_ || stopping_ || rejected_) {
    if (refusal)
      *refusal = !death_reason_.empty() ? death_reason_
                 : rejected_ ? "the sandbox was stopped because its agent sent a malformed message: " + rejection_
                             : "the sandbox is stopping";
    return false;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pending_[id] = Pending{std::move(callback), std::move(notes), deadline};
  // The watchdog sleeps until the earliest deadline it knows of: waking it
  // for a later one would cost a thread switch per call for nothing.
  if (deadline < watchdog_wake_) changed_.notify_all();
  return true;
}

std::uint64_t AgentClient::call_async(const std::string& method, json params, std::chrono::milliseconds timeout,
                                      Callback callback, NoteSink notes) {
  std::uint64_t id;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
  }
  std::string refusal;
  if (!register_pending(id, callback, std::move(notes), timeout, &refusal)) {
    callback(Outcome{json(), SandboxError(codes::kSandboxFailed, refusal)});
    return id;
  }
  if (!send(rpc::make_request(id, method, params))) {
    deliver(id, Outcome{json(), SandboxError(codes::kSandboxFailed, "the sandbox's agent is not reachable")});
  }
  return id;
}

std::optional<std::uint64_t> AgentClient::try_call_async(const std::string& method, const json& params,
                                                         std::chrono::milliseconds timeout, Callback& callback,
                                                         const NoteSink& notes) {
  std::uint64_t id;
  {
    std::lock_guard lock(mutex_);
    if (dead_ || stopping_ || rejected_) return std::nullopt;  // the blocking path explains it
    id = next_id_++;  // an id given up below is just never used
  }
  std::string line = rpc::serialize(rpc::make_request(id, method, params));
  line.push_back('\n');
  bool registered = false;
  bool sent = try_write(line, [&] { return registered = register_pending(id, callback, notes, timeout, nullptr); });
  if (!registered) return std::nullopt;
  if (!sent) deliver(id, Outcome{json(), SandboxError(codes::kSandboxFailed, "the sandbox's agent is not reachable")});
  return id;
}

bool AgentClient::try_write(const std::string& line, const std::function<bool()>& before) {
  std::unique_lock write_lock(write_mutex_, std::try_to_lock);
  if (!write_lock.owns_lock() || to_agent_ < 0) return false;
  // The pipe counts pages, partly filled ones included: a line is written
  // only when it fits in half the capacity less a page.
  int queued = 0;
  if (ioctl(to_agent_, FIONREAD, &queued) != 0 ||
      line.size() + static_cast<std::size_t>(queued) + 4096 > to_agent_capacity_ / 2)
    return false;
  if (before && !before()) return false;
  return rpc::write_all(to_agent_, line) == 0;
}

bool AgentClient::send(const json& message) {
  std::string line = rpc::serialize(message);
  line.push_back('\n');
  // One writer at a time: a line longer than PIPE_BUF is not written atomically.
  std::lock_guard lock(write_mutex_);
  return to_agent_ >= 0 && rpc::write_all(to_agent_, line) == 0;
}

json AgentClient::call(const std::string& method, json params, std::chrono::milliseconds timeout, NoteSink notes) {
  std::promise<Outcome> promise;
  auto future = promise.get_future();
  call_async(method, std::move(params), timeout, [&promise](Outcome o) { promise.set_value(std::move(o)); },
             std::move(notes));
  Outcome outcome = future.get();
  if (outcome.error) throw *outcome.error;
  return outcome.result;
}

void AgentClient::cancel(std::uint64_t id) {
  // Called on the server's stdin reader (notifications/cancelled) and by the
  // watchdog: neither may wait for a pipe a stuck agent does not drain.
  std::string line = rpc::serialize(rpc::make_notification("cancel", {{"id", id}}));
  line.push_back('\n');
  if (try_write(line)) return;
  auto self = weak_from_this().lock();
  if (!self) return;
  std::thread([self, line = std::move(line)] {
    std::lock_guard lock(self->write_mutex_);
    if (self->to_agent_ >= 0) rpc::write_all(self->to_agent_, line);
  }).detach();
}

bool AgentClient::alive() const {
  std::lock_guard lock(mutex_);
  return !dead_ && !stopping_ && !rejected_;
}

bool AgentClient::stopped() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

std::string AgentClient::death_reason() const {
  std::lock_guard lock(mutex_);
  return death_reason_;
}

void AgentClient::watchdog_main() {
  std::unique_lock lock(mutex_);
  while (!dead_) {
    auto now = std::chrono::steady_clock::now();
    auto next = now + std::chrono::hours(1);
    std::vector<std::uint64_t> expired;
    for (const auto& [id, p] : pending_) {
      if (p.deadline <= now) expired.push_back(id);
      else next = std::min(next, p.deadline);
    }
    if (!expired.empty()) {
      lock.unlock();
      for (auto id : expired) {
        cancel(id);
        deliver(id, Outcome{json(), SandboxError(codes::kAgentTimeout,
                                                 "the sandbox did not answer in time; the request was abandoned")});
      }
      lock.lock();
      continue;
    }
    watchdog_wake_ = next;
    changed_.wait_until(lock, next);
  }
}

void AgentClient::fail_all(const std::string& code, const std::string& message) {
  std::map<std::uint64_t, Pending> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
  }
  for (auto& [id, p] : pending) run_callback(p.callback, Outcome{json(), SandboxError(code, message)});
}

void AgentClient::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !launched_) return;
    stopping_ = true;
  }
  {
    // EOF on its stdin tells the agent to kill its processes and exit. A
    // writer blocked on a full pipe (an agent that stopped reading: frozen,
    // hung) holds the lock: kill the sandbox, and the writer gets EPIPE.
    std::unique_lock lock(write_mutex_, std::defer_lock);
    if (!lock.try_lock_for(std::chrono::milliseconds(500))) {
      spdlog::warn("sandbox {}: its agent does not read its requests; killing it", name_);
      kill_launched(pid_);
      lock.lock();
    }
    if (to_agent_ >= 0) close(to_agent_);
    to_agent_ = -1;
  }
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, std::chrono::milliseconds(500), [this] { return dead_; })) {
    kill_launched(pid_);
    changed_.wait_for(lock, std::chrono::seconds(5), [this] { return dead_; });
  }
}

namespace {

// The last reference to a client can go on one of its own threads: a call's
// callback holds a lease on the sandbox, and the reader thread runs the
// callbacks fail_all() fails when the agent is gone (after a destroy, say),
// so the sandbox and its client may be released there. A thread cannot join
// itself; that one is at the very end of its work (fail_all is the reader's
// last step) and is left to finish on its own.
void join_or_detach(std::thread& t) {
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) t.detach();
  else t.join();
}

}  // namespace

AgentClient::~AgentClient() {
  stop();
  {
    std::lock_guard lock(mutex_);
    if (!dead_) kill_launched(pid_);
  }
  join_or_detach(reader_);
  {
    std::lock_guard lock(mutex_);
    dead_ = true;
    changed_.notify_all();
  }
  join_or_detach(watchdog_);
  if (from_agent_ >= 0) close(from_agent_);
}

}  // namespace agentbox::sandbox
