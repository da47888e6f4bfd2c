// The one place for cross-cutting concerns of the JSON-RPC conversation with the
// host (clangd's MessageHandler): framing errors, classification, initialization
// gating, protocol eras, request logging with durations, exactly one reply per
// request, cancellation, progress, and running handlers off the reader thread.
// Handlers only do their own work.
#pragma once

#include "rpc/message.h"
#include "server/protocol.h"

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::server {

// Where outgoing messages go (the transport, plus the recorder).
class Output {
 public:
  virtual ~Output() = default;
  virtual void send(const json& message) = 0;
  // The same message already serialised (line is rpc::serialize(message)):
  // a transport writes the line instead of serialising a large result again.
  virtual void send_serialized(const json& message, std::string_view line) {
    (void)line;
    send(message);
  }
};

class Dispatcher;

// One request in flight. Handlers get a shared_ptr and answer through reply()
// or reply_error() exactly once, from any thread.
class Call {
 public:
  Call(Dispatcher& dispatcher, rpc::Request request, RequestMeta meta);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  const json& id() const { return request_.id; }
  const std::string& method() const { return request_.method; }
  const json& params() const { return request_.params; }
  const RequestMeta& meta() const { return meta_; }
  // True when the request speaks the 2026-07-28 era (version in _meta).
  bool modern() const { return meta_.protocol_version.has_value(); }

  void reply(json result);
  void reply_error(const rpc::Error& error);
  // The result to send instead of one whose reply would exceed the message
  // limit; without it such a reply becomes -32603. tools/call answers with an
  // error result instead (docs/protocol.md, "Error results").
  using Oversized = std::function<json(std::size_t bytes, std::size_t limit)>;
  void on_oversized(Oversized fn);

  // Sends notifications/progress when the request carried a progressToken;
  // values that do not increase, and anything after the reply, are dropped.
  void progress(double done, std::optional<double> total, const std::string& message);

  bool cancelled() const { return cancelled_.load(); }
  void on_cancel(std::function<void()> fn);
  void cancel(const std::string& reason);

 private:
  friend class Dispatcher;
  void finish(json message, const char* outcome);

  Dispatcher& dispatcher_;
  rpc::Request request_;
  RequestMeta meta_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  bool replied_ = false;
  double last_progress_ = -1;
  std::atomic<bool> cancelled_{false};
  std::vector<std::function<void()>> cancel_hooks_;
  Oversized oversized_;
};

class Dispatcher {
 public:
  using RequestHandler = std::function<void(std::shared_ptr<Call>)>;
  using NotificationHandler = std::function<void(const json& params)>;

  // Inline handlers run on the reader thread, in arrival order; they must be
  // quick (lifecycle methods whose effects later lines depend on). Pooled
  // handlers run on the worker pool, concurrently.
  enum class Run { Inline, Pooled };
  // For a pooled method: true when this request may run inline after all
  // (its handler promises not to block for it, e.g. a small file operation
  // on a running sandbox), saving the hand-off to a pool thread.
  using InlineIf = std::function<bool(const json& params)>;
  // Gated methods need a completed initialize in the legacy eras; modern-era
  // requests (version in _meta) need none.
  enum class Gate { Open, Initialized };

  struct Options {
    std::size_t workers = 4;
    std::size_t max_message_bytes = 8 * 1024 * 1024;  // replies larger than this become errors
  };

  Dispatcher(Output& output, Options options);
  ~Dispatcher();

  void on_request(std::string method, Run run, Gate gate, RequestHandler handler, InlineIf inline_if = {});
  void on_notification(std::string method, NotificationHandler handler);

  // Feeds one framed line from the transport.
  void handle_line(const std::string& line);
  // A line longer than the limit: answered with -32600 and skipped.
  void handle_oversized(std::size_t bytes, std::size_t limit);

  void set_initialized() { initialized_.store(true); }
  bool initialized() const { return initialized_.load(); }

  // Sends a notification to the host (progress, log messages).
  void notify(std::string_view method, const json& params);

  // Cancels every call in flight (their replies are suppressed), waits for
  // the worker pool to drain and for every call to be answered or dropped
  // (tools may answer from threads of their own, which must not outlive this).
  void shutdown();

  std::size_t in_flight() const;

 private:
  friend class Call;
  struct Route {
    Run run;
    Gate gate;
    RequestHandler handler;
    InlineIf inline_if;
  };

  void dispatch(rpc::Request request);
  void handle_response(const rpc::Response& response);
  void handle_cancelled(const json& params);
  void send(const json& message);
  void forget(const Call& call);
  void finishing(int delta);
  void run_handler(const Route& route, std::shared_ptr<Call> call);
  bool runs_inline(const Route& route, const Call& call) const;

  Output& output_;
  Options options_;
  boost::asio::thread_pool pool_;
  std::map<std::string, Route> requests_;
  std::map<std::string, NotificationHandler> notifications_;
  std::atomic<bool> initialized_{false};
  std::atomic<bool> stopping_{false};
  mutable std::mutex calls_mutex_;
  std::map<std::string, std::weak_ptr<Call>> calls_;  // key: serialized id
  int finishing_ = 0;  // calls between leaving calls_ and sending their answer
  std::condition_variable calls_idle_;  // calls_ empty and finishing_ zero
};

}  // namespace agentbox::server
