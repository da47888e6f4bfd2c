#include "server/dispatcher.h"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <cmath>

namespace agentbox::server {

namespace {

std::shared_ptr<spdlog::logger> rpc_log() {
  // Request logging goes to stderr only: forwarding it to the host as
  // notifications/message would make every request produce extra traffic.
  auto logger = spdlog::get("rpc");
  return logger ? logger : spdlog::default_logger();
}

std::string id_key(const json& id) { return id.dump(); }

}  // namespace

// ---------------------------------------------------------------- Call

Call::Call(Dispatcher& dispatcher, rpc::Request request, RequestMeta meta)
    : dispatcher_(dispatcher),
      request_(std::move(request)),
      meta_(std::move(meta)),
      start_(std::chrono::steady_clock::now()) {}

Call::~Call() {
  release_order();
  bool answered;
  {
    std::lock_guard lock(mutex_);
    answered = replied_;
  }
  if (!answered && !cancelled()) {
    rpc_log()->error("{}({}) was dropped without a reply; answering with an internal error", method(), id().dump());
    finish(rpc::make_error(id(), {rpc::ErrorCode::InternalError, "internal error: the request was dropped", nullptr}),
           "dropped");
  } else if (!answered) {
    // Cancelled and dropped: no reply is due, but the id is no longer in flight.
    dispatcher_.forget(*this);
  }
}

void Call::reply(json result) {
  if (modern() && result.is_object() && !result.contains("resultType")) result["resultType"] = "complete";
  finish(rpc::make_result(id(), std::move(result)), "ok");
}

void Call::reply_error(const rpc::Error& error) { finish(rpc::make_error(id(), error), "error"); }

void Call::release_order() {
  if (order_key_ && !order_released_.exchange(true)) dispatcher_.release_lane(*order_key_);
}

void Call::on_oversized(Oversized fn) {
  std::lock_guard lock(mutex_);
  oversized_ = std::move(fn);
}

void Call::finish(json message, const char* outcome) {
  std::lock_guard lock(mutex_);
  if (replied_) {
    rpc_log()->error("{}({}) answered twice; the second answer is dropped", method(), id().dump());
    return;
  }
  replied_ = true;
  held_.reset();  // what a tool reported last is in its answer
  // Counted until the answer is sent, so shutdown() waits for it; the id is
  // freed first so that a host reusing it after the answer is not refused.
  dispatcher_.finishing(+1);
  dispatcher_.forget(*this);
  release_order();
  if (cancelled()) {
    // MCP: a cancelled request gets no response.
    auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
    rpc_log()->info("--> {}({}) cancelled, reply suppressed, {} ms", method(), id().dump(), elapsed.count());
    dispatcher_.finishing(-1);
    return;
  }
  std::string text = rpc::serialize(message);
  if (text.size() > dispatcher_.options_.max_message_bytes) {
    rpc_log()->error("{}({}) produced a {} byte reply, over the {} byte limit", method(), id().dump(), text.size(),
                     dispatcher_.options_.max_message_bytes);
    if (oversized_ && message.contains("result")) {
      json result = oversized_(text.size(), dispatcher_.options_.max_message_bytes);
      if (modern() && result.is_object() && !result.contains("resultType")) result["resultType"] = "complete";
      message = rpc::make_result(id(), std::move(result));
    } else {
      message = rpc::make_error(
          id(), {rpc::ErrorCode::InternalError,
                 "internal error: the result (" + std::to_string(text.size()) + " bytes) is larger than the " +
                     std::to_string(dispatcher_.options_.max_message_bytes) + " byte message limit",
                 nullptr});
      outcome = "error";
    }
    text = rpc::serialize(message);
  }
  // A reply the host could read in one chunk with the last progress
  // notification waits for the pacer (a dropped call, answered from the
  // destructor, cannot wait).
  if (!quiet_locked(Clock::now())) {
    if (auto self = weak_from_this().lock()) {
      deferred_ = Deferred{std::move(message), std::move(text), outcome, Clock::now()};
      dispatcher_.defer(std::move(self));
      return;
    }
  }
  write_reply(std::move(message), text, outcome);
}

void Call::write_reply(json message, const std::string& text, const char* outcome,
                       std::optional<Clock::duration> waited) {
  dispatcher_.output_.send_serialized(message, text);
  auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  if (waited)
    rpc_log()->info("--> {}({}) {} {} ms (waited {} ms for the host to read progress)", method(), id().dump(), outcome,
                    ms(Clock::now() - start_), ms(*waited));
  else
    rpc_log()->info("--> {}({}) {} {} ms", method(), id().dump(), outcome, ms(Clock::now() - start_));
  dispatcher_.finishing(-1);
}

// The official TypeScript SDK handles a response read in the same chunk as a
// progress notification before the notification (responses synchronously,
// notifications a microtask later), finds the request gone and reports "unknown
// progress token" through onerror. So the reply waits until the host has read
// the notification (docs/protocol.md, "Progress").
bool Call::quiet_locked(Clock::time_point now) const {
  if (!progress_sent_) return true;
  const auto& options = dispatcher_.options_;
  if (now - last_sent_at_ >= options.read_wait_cap) return true;
  if (auto read = dispatcher_.output_.read_up_to(last_mark_)) return *read;
  return now - last_sent_at_ >= options.quiet_gap;
}

void Call::progress(double done, std::optional<double> total, const std::string& message) {
  if (!meta_.progress_token) return;
  std::lock_guard lock(mutex_);
  if (replied_ || cancelled()) return;
  held_ = Report{done, total, message};
  if (Clock::now() - start_ >= dispatcher_.options_.progress_delay) send_progress_locked();
}

void Call::send_progress_locked() {
  bool fresh = held_ && held_->total && (!progress_sent_ || held_->done > last_progress_);
  double value = fresh ? held_->done : (progress_sent_ ? std::floor(last_progress_) + 1 : 1);
  json params = {{"progressToken", *meta_.progress_token}, {"progress", value}};
  if (fresh) params["total"] = *held_->total;
  std::string message;
  if (held_) {
    message = held_->message;
  } else {
    auto running = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start_);
    message = "still running after " + std::to_string(running.count()) + " s";
  }
  if (!message.empty()) params["message"] = std::move(message);
  dispatcher_.notify("notifications/progress", params);
  held_.reset();
  progress_sent_ = true;
  last_progress_ = value;
  last_sent_at_ = Clock::now();
  last_mark_ = dispatcher_.output_.written();
}

std::optional<Call::Clock::time_point> Call::pace(Clock::time_point now, bool flush) {
  std::lock_guard lock(mutex_);
  if (deferred_) {
    if (!flush && !quiet_locked(now)) return now + std::chrono::milliseconds(1);
    Deferred reply = std::move(*deferred_);
    deferred_.reset();
    write_reply(std::move(reply.message), reply.text, reply.outcome, now - reply.since);
    return std::nullopt;
  }
  if (replied_ || cancelled()) return std::nullopt;
  const auto& options = dispatcher_.options_;
  if (now - start_ < options.progress_delay) return start_ + options.progress_delay;
  // What the call reported before it was old enough, then a heartbeat
  // whenever it has been silent too long (since its start or last notification).
  if (held_) send_progress_locked();
  auto since = progress_sent_ ? last_sent_at_ : start_;
  if (now - since >= options.heartbeat) {
    send_progress_locked();
    since = last_sent_at_;
  }
  return since + options.heartbeat;
}

void Call::on_cancel(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (!cancelled()) {
      cancel_hooks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void Call::cancel(const std::string& reason) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mutex_);
    if (replied_ || cancelled_.exchange(true)) return;
    hooks.swap(cancel_hooks_);
  }
  rpc_log()->info("<-- cancel {}({}){}", method(), id().dump(), reason.empty() ? "" : ": " + reason);
  for (auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      rpc_log()->error("cancelling {}({}) failed: {}", method(), id().dump(), e.what());
    }
  }
}

// ---------------------------------------------------------------- Dispatcher

Dispatcher::Dispatcher(Output& output, Options options)
    : output_(output), options_(options), pool_(options.workers) {
  on_notification("notifications/cancelled", [this](const json& params) { handle_cancelled(params); });
  pacer_ = std::thread([this] { pacer_main(); });
}

Dispatcher::~Dispatcher() { shutdown(); }

void Dispatcher::on_request(std::string method, Run run, Gate gate, RequestHandler handler, InlineIf inline_if,
                            OrderKey order_key) {
  requests_[std::move(method)] = Route{run, gate, std::move(handler), std::move(inline_if), std::move(order_key)};
}

void Dispatcher::on_notification(std::string method, NotificationHandler handler) {
  notifications_[std::move(method)] = std::move(handler);
}

void Dispatcher::send(const json& message) { output_.send(message); }

void Dispatcher::notify(std::string_view method, const json& params) {
  send(rpc::make_notification(method, params));
}

void Dispatcher::handle_oversized(std::size_t bytes, std::size_t limit) {
  rpc_log()->warn("skipped a {} byte line (limit {} bytes)", bytes, limit);
  send(rpc::make_error(nullptr, {rpc::ErrorCode::InvalidRequest,
                                 "message of " + std::to_string(bytes) + " bytes exceeds the " +
                                     std::to_string(limit) + " byte limit and was skipped",
                                 json{{"bytes", bytes}, {"limit", limit}}}));
}

void Dispatcher::handle_line(const std::string& line) {
  auto parsed = rpc::parse_message(line);
  if (auto* bad = std::get_if<rpc::Invalid>(&parsed)) {
    rpc_log()->warn("<-- invalid message: {}", bad->error.message);
    send(rpc::make_error(bad->id, bad->error));
    return;
  }
  auto& message = std::get<rpc::Message>(parsed);
  if (auto* request = std::get_if<rpc::Request>(&message)) {
    dispatch(std::move(*request));
  } else if (auto* note = std::get_if<rpc::Notification>(&message)) {
    auto it = notifications_.find(note->method);
    if (it == notifications_.end()) {
      // Unknown notifications are ignored, as JSON-RPC requires (no reply possible).
      rpc_log()->debug("<-- {} (ignored notification)", note->method);
      return;
    }
    rpc_log()->debug("<-- {}", note->method);
    try {
      it->second(note->params);
    } catch (const std::exception& e) {
      rpc_log()->error("notification {} failed: {}", note->method, e.what());
    }
  } else {
    handle_response(std::get<rpc::Response>(message));
  }
}

void Dispatcher::handle_response(const rpc::Response& response) {
  // The server sends no requests to the host, so any response is unsolicited.
  rpc_log()->warn("<-- response to id {} that the server never sent; ignored", response.id.dump());
}

void Dispatcher::handle_cancelled(const json& params) {
  if (!params.is_object() || !params.contains("requestId")) {
    rpc_log()->warn("notifications/cancelled without requestId; ignored");
    return;
  }
  std::shared_ptr<Call> call;
  {
    std::lock_guard lock(calls_mutex_);
    auto it = calls_.find(id_key(params["requestId"]));
    if (it != calls_.end()) call = it->second.lock();
  }
  if (!call) {
    // It may have finished already: the spec says to ignore such races.
    rpc_log()->debug("cancel for unknown or finished request {}", params["requestId"].dump());
    return;
  }
  call->cancel(params.value("reason", ""));
}

void Dispatcher::dispatch(rpc::Request request) {
  rpc_log()->info("<-- {}({})", request.method, request.id.dump());
  if (stopping_.load()) {
    send(rpc::make_error(request.id, {rpc::ErrorCode::InternalError, "the server is shutting down", nullptr}));
    return;
  }
  RequestMeta meta;
  try {
    meta = parse_request_meta(request.params);
  } catch (const ProtocolError& e) {
    send(rpc::make_error(request.id, e.error()));
    return;
  }
  if (meta.protocol_version && !is_supported_modern_version(*meta.protocol_version)) {
    send(rpc::make_error(request.id, {mcp_error::UnsupportedProtocolVersion,
                                      "unsupported protocol version \"" + *meta.protocol_version + "\"",
                                      json{{"supported", supported_versions_json()},
                                           {"requested", *meta.protocol_version}}}));
    return;
  }
  auto route = requests_.find(request.method);
  if (route == requests_.end()) {
    send(rpc::make_error(request.id, {rpc::ErrorCode::MethodNotFound, "method not found: " + request.method,
                                      json{{"method", request.method}}}));
    return;
  }
  if (route->second.gate == Gate::Initialized && !meta.protocol_version && !initialized()) {
    send(rpc::make_error(request.id, {mcp_error::ServerNotInitialized,
                                      "server not initialized: send \"initialize\" first (or name a protocol "
                                      "version in _meta)",
                                      nullptr}));
    return;
  }
  auto call = std::make_shared<Call>(*this, std::move(request), std::move(meta));
  {
    std::lock_guard lock(calls_mutex_);
    auto [it, inserted] = calls_.emplace(id_key(call->id()), call);
    if (!inserted && !it->second.expired()) {
      // Mark it answered first so the Call destructor stays quiet.
      rpc::Error error{rpc::ErrorCode::InvalidRequest,
                       "request id " + call->id().dump() + " is already in use by a request in flight", nullptr};
      send(rpc::make_error(call->id(), error));
      std::lock_guard call_lock(call->mutex_);
      call->replied_ = true;
      return;
    }
    it->second = call;
  }
  if (call->meta().progress_token) pace(call);
  if (!enter_lane(route->second, call)) return;
  if (route->second.run == Run::Inline || runs_inline(route->second, *call)) {
    run_handler(route->second, std::move(call));
  } else {
    boost::asio::post(pool_, [this, route = route->second, call = std::move(call)]() mutable {
      run_handler(route, std::move(call));
    });
  }
}

bool Dispatcher::runs_inline(const Route& route, const Call& call) const {
  if (!route.inline_if) return false;
  try {
    return route.inline_if(call.params());
  } catch (const std::exception& e) {
    rpc_log()->warn("{}({}): deciding where to run it failed: {}", call.method(), call.id().dump(), e.what());
    return false;
  }
}

std::optional<std::string> Dispatcher::order_key(const Route& route, const Call& call) const {
  if (!route.order_key) return std::nullopt;
  try {
    return route.order_key(call.params());
  } catch (const std::exception& e) {
    rpc_log()->warn("{}({}): deciding its order failed: {}", call.method(), call.id().dump(), e.what());
    return std::nullopt;
  }
}

bool Dispatcher::enter_lane(const Route& route, const std::shared_ptr<Call>& call) {
  auto key = order_key(route, *call);
  if (!key) return true;
  call->order_key_ = key;
  std::lock_guard lock(lanes_mutex_);
  auto [lane, idle] = lanes_.try_emplace(*key);
  if (idle) return true;
  lane->second.waiting.emplace_back(&route, call);
  return false;
}

void Dispatcher::release_lane(const std::string& key) {
  std::shared_ptr<Call> dropped;  // destroyed outside the lock: it releases its own order
  {
    std::lock_guard lock(lanes_mutex_);
    auto lane = lanes_.find(key);
    if (lane == lanes_.end()) return;
    if (lane->second.waiting.empty()) {
      lanes_.erase(lane);
      return;
    }
    // Not a structured binding: clang before 16 cannot capture one in a lambda.
    auto waiting = std::move(lane->second.waiting.front());
    lane->second.waiting.pop_front();
    auto route = waiting.first;
    auto call = std::move(waiting.second);
    // Posted under the lock: shutdown() sets stopping_ under it, so a call is
    // either in the pool before the pool is joined or dropped here.
    if (stopping_.load()) {
      dropped = std::move(call);
    } else {
      boost::asio::post(pool_, [this, route, call = std::move(call)]() mutable {
        // A call cancelled while it waited is dropped: no reply is due.
        if (!call->cancelled()) run_handler(*route, std::move(call));
      });
    }
  }
}

void Dispatcher::pace(std::shared_ptr<Call> call) {
  {
    std::lock_guard lock(pacer_mutex_);
    paced_.push_back(call);
    pacer_dirty_ = true;
  }
  pacer_wake_.notify_one();
}

void Dispatcher::defer(std::shared_ptr<Call> call) {
  {
    std::lock_guard lock(pacer_mutex_);
    deferred_.push_back(std::move(call));
    pacer_dirty_ = true;
  }
  pacer_wake_.notify_one();
}

void Dispatcher::pacer_main() {
  std::unique_lock lock(pacer_mutex_);
  while (!pacer_stop_) {
    // Calls are paced without pacer_mutex_ held: a call defers its reply
    // under its own lock, which pace() takes.
    auto paced = std::move(paced_);
    auto deferred = std::move(deferred_);
    bool flush = pacer_flush_;
    lock.unlock();
    auto now = Call::Clock::now();
    auto next = now + std::chrono::hours(1);
    std::vector<std::weak_ptr<Call>> still_paced;
    for (auto& weak : paced) {
      auto call = weak.lock();
      if (!call) continue;
      if (auto due = call->pace(now, flush)) {
        next = std::min(next, *due);
        still_paced.push_back(std::move(weak));
      }
    }
    std::vector<std::shared_ptr<Call>> still_deferred;
    for (auto& call : deferred) {
      if (auto due = call->pace(now, flush)) {
        next = std::min(next, *due);
        still_deferred.push_back(std::move(call));
      }
    }
    // Dropped outside the lock: a last reference ends a call.
    deferred.clear();
    lock.lock();
    for (auto& weak : still_paced) paced_.push_back(std::move(weak));
    for (auto& call : still_deferred) deferred_.push_back(std::move(call));
    pacer_wake_.wait_until(lock, next, [this] { return pacer_dirty_ || pacer_stop_; });
    pacer_dirty_ = false;
  }
}

void Dispatcher::run_handler(const Route& route, std::shared_ptr<Call> call) {
  try {
    route.handler(call);
  } catch (const ProtocolError& e) {
    call->reply_error(e.error());
  } catch (const std::exception& e) {
    rpc_log()->error("{}({}) failed: {}", call->method(), call->id().dump(), e.what());
    call->reply_error({rpc::ErrorCode::InternalError, std::string("internal error: ") + e.what(), nullptr});
  }
}

void Dispatcher::forget(const Call& call) {
  std::lock_guard lock(calls_mutex_);
  auto it = calls_.find(id_key(call.id()));
  if (it != calls_.end()) {
    auto current = it->second.lock();
    if (!current || current.get() == &call) calls_.erase(it);
  }
  if (calls_.empty() && finishing_ == 0) calls_idle_.notify_all();
}

void Dispatcher::finishing(int delta) {
  std::lock_guard lock(calls_mutex_);
  finishing_ += delta;
  if (calls_.empty() && finishing_ == 0) calls_idle_.notify_all();
}

std::size_t Dispatcher::in_flight() const {
  std::lock_guard lock(calls_mutex_);
  return calls_.size();
}

void Dispatcher::shutdown() {
  std::vector<std::shared_ptr<Call>> waiting;
  {
    std::lock_guard lock(lanes_mutex_);
    if (stopping_.exchange(true)) return;
    for (auto& [key, lane] : lanes_)
      for (auto& entry : lane.waiting) waiting.push_back(std::move(entry.second));
    lanes_.clear();
  }
  std::vector<std::shared_ptr<Call>> live;
  {
    std::lock_guard lock(calls_mutex_);
    for (auto& [key, weak] : calls_)
      if (auto call = weak.lock()) live.push_back(std::move(call));
  }
  for (auto& call : live) call->cancel("server shutting down");
  live.clear();
  waiting.clear();
  {
    std::lock_guard lock(pacer_mutex_);
    pacer_flush_ = pacer_dirty_ = true;
  }
  pacer_wake_.notify_one();
  pool_.join();
  {
    std::unique_lock lock(calls_mutex_);
    if (!calls_.empty() || finishing_ > 0)
      rpc_log()->info("waiting for {} cancelled calls to finish", calls_.size() + finishing_);
    calls_idle_.wait(lock, [this] { return calls_.empty() && finishing_ == 0; });
  }
  {
    std::lock_guard lock(pacer_mutex_);
    pacer_stop_ = true;
  }
  pacer_wake_.notify_one();
  pacer_.join();
}

}  // namespace agentbox::server
