#include "server/dispatcher.h"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

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
  if (modern() && result.is_object()) result["resultType"] = "complete";
  finish(rpc::make_result(id(), std::move(result)), "ok");
}

void Call::reply_error(const rpc::Error& error) { finish(rpc::make_error(id(), error), "error"); }

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
  // Counted until the answer is sent, so shutdown() waits for it; the id is
  // freed first so that a host reusing it after the answer is not refused.
  dispatcher_.finishing(+1);
  struct Finished {
    Dispatcher& dispatcher;
    ~Finished() { dispatcher.finishing(-1); }
  } finished{dispatcher_};
  dispatcher_.forget(*this);
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_);
  if (cancelled()) {
    // MCP: a cancelled request gets no response.
    rpc_log()->info("--> {}({}) cancelled, reply suppressed, {} ms", method(), id().dump(), elapsed.count());
    return;
  }
  std::string text = rpc::serialize(message);
  if (text.size() > dispatcher_.options_.max_message_bytes) {
    rpc_log()->error("{}({}) produced a {} byte reply, over the {} byte limit", method(), id().dump(), text.size(),
                     dispatcher_.options_.max_message_bytes);
    if (oversized_ && message.contains("result")) {
      json result = oversized_(text.size(), dispatcher_.options_.max_message_bytes);
      if (modern() && result.is_object()) result["resultType"] = "complete";
      message = rpc::make_result(id(), std::move(result));
    } else {
      message = rpc::make_error(
          id(), {rpc::ErrorCode::InternalError,
                 "internal error: the result (" + std::to_string(text.size()) + " bytes) is larger than the " +
                     std::to_string(dispatcher_.options_.max_message_bytes) + " byte message limit",
                 nullptr});
      outcome = "error";
    }
    dispatcher_.send(message);
  } else {
    dispatcher_.output_.send_serialized(message, text);
  }
  rpc_log()->info("--> {}({}) {} {} ms", method(), id().dump(), outcome, elapsed.count());
}

void Call::progress(double done, std::optional<double> total, const std::string& message) {
  if (!meta_.progress_token) return;
  std::lock_guard lock(mutex_);
  if (replied_ || cancelled() || done <= last_progress_) return;
  last_progress_ = done;
  json params = {{"progressToken", *meta_.progress_token}, {"progress", done}};
  if (total) params["total"] = *total;
  if (!message.empty()) params["message"] = message;
  dispatcher_.notify("notifications/progress", params);
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
}

Dispatcher::~Dispatcher() { shutdown(); }

void Dispatcher::on_request(std::string method, Run run, Gate gate, RequestHandler handler, InlineIf inline_if) {
  requests_[std::move(method)] = Route{run, gate, std::move(handler), std::move(inline_if)};
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
    send(rpc::make_error(request.id, {rpc::ErrorCode::UnsupportedProtocolVersion,
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
    send(rpc::make_error(request.id, {rpc::ErrorCode::ServerNotInitialized,
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
  if (stopping_.exchange(true)) return;
  std::vector<std::shared_ptr<Call>> live;
  {
    std::lock_guard lock(calls_mutex_);
    for (auto& [key, weak] : calls_)
      if (auto call = weak.lock()) live.push_back(std::move(call));
  }
  for (auto& call : live) call->cancel("server shutting down");
  live.clear();
  pool_.join();
  std::unique_lock lock(calls_mutex_);
  if (!calls_.empty() || finishing_ > 0)
    rpc_log()->info("waiting for {} cancelled calls to finish", calls_.size() + finishing_);
  calls_idle_.wait(lock, [this] { return calls_.empty() && finishing_ == 0; });
}

}  // namespace agentbox::server
