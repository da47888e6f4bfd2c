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
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  // Bytes written so far: a mark to ask read_up_to() about later.
  virtual std::uint64_t written() const { return 0; }
  // Whether the host has read everything written up to mark; nullopt when
  // the output cannot tell (a file, a terminal).
  virtual std::optional<bool> read_up_to(std::uint64_t mark) const {
    (void)mark;
    return std::nullopt;
  }
};

class Dispatcher;

// One request in flight. Handlers get a shared_ptr and answer through reply()
// or reply_error() exactly once, from any thread.
class Call : public std::enable_shared_from_this<Call> {
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

  // Reports progress when the request carried a progressToken. Paced
  // (docs/protocol.md, "Progress"): nothing in a call's first
  // Options::progress_delay (only the latest report is kept for then), a
  // heartbeat when the call has said nothing for Options::heartbeat, never
  // after the reply, and the reply waits until the host has read the last
  // notification. Values sent increase strictly: a report with a total sends
  // its own value when that is an increase; otherwise the value is the next
  // whole number.
  void progress(double done, std::optional<double> total, const std::string& message);

  // Lets the next call with the same order key start (Dispatcher::OrderKey):
  // this call's effect is fixed in order, e.g. handed to the sandbox. Done
  // at the latest when the call is answered or dropped.
  void release_order();

  bool cancelled() const { return cancelled_.load(); }
  void on_cancel(std::function<void()> fn);
  void cancel(const std::string& reason);

 private:
  friend class Dispatcher;
  using Clock = std::chrono::steady_clock;
  struct Report {
    double done;
    std::optional<double> total;
    std::string message;
  };
  void finish(json message, const char* outcome);
  // waited: how long the reply waited for the host to read progress (logged).
  void write_reply(json message, const std::string& text, const char* outcome,
                   std::optional<Clock::duration> waited = std::nullopt);
  void send_progress_locked();
  // Called by the pacer: sends what is due; when the call wants the pacer
  // again, the time to come back.
  std::optional<Clock::time_point> pace(Clock::time_point now, bool flush);
  // True when a reply written now cannot reach the host in the same read as
  // the last progress notification.
  bool quiet_locked(Clock::time_point now) const;

  Dispatcher& dispatcher_;
  rpc::Request request_;
  RequestMeta meta_;
  Clock::time_point start_;
  std::mutex mutex_;
  bool replied_ = false;
  std::atomic<bool> cancelled_{false};
  std::vector<std::function<void()>> cancel_hooks_;
  // Progress, guarded by mutex_.
  std::optional<Report> held_;  // reported in the first progress_delay, not sent yet
  bool progress_sent_ = false;
  double last_progress_ = 0;           // the last value sent
  Clock::time_point last_sent_at_;     // when it was written
  std::uint64_t last_mark_ = 0;        // Output::written() after it
  struct Deferred {
    json message;
    std::string text;
    const char* outcome;
    Clock::time_point since;
  };
  std::optional<Deferred> deferred_;  // a reply waiting for the host to read the last notification
  // Ordering.
  std::optional<std::string> order_key_;
  std::atomic<bool> order_released_{false};
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
  // Requests with the same order key start in arrival order, each once the
  // one before it released the order (Call::release_order); other keys do
  // not wait. Computed on the reader thread; nullopt: not ordered.
  using OrderKey = std::function<std::optional<std::string>(const json& params)>;
  // Gated methods need a completed initialize in the legacy eras; modern-era
  // requests (version in _meta) need none.
  enum class Gate { Open, Initialized };

  struct Options {
    std::size_t workers = 4;
    std::size_t max_message_bytes = 8 * 1024 * 1024;  // replies larger than this become errors
    // Progress pacing (docs/protocol.md, "Progress").
    std::chrono::milliseconds progress_delay{1000};  // a call this fast sends no progress
    // Longest silence of a call with a progressToken, from its start or its
    // last notification (hosts reset their tool timeouts on progress).
    std::chrono::milliseconds heartbeat{1000};
    // A reply waits until the host read the last notification, at most this
    // long; when the output cannot tell, it waits quiet_gap after it.
    std::chrono::milliseconds read_wait_cap{2000};
    std::chrono::milliseconds quiet_gap{250};
  };

  Dispatcher(Output& output, Options options);
  ~Dispatcher();

  void on_request(std::string method, Run run, Gate gate, RequestHandler handler, InlineIf inline_if = {},
                  OrderKey order_key = {});
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
    OrderKey order_key;
  };
  // The calls of one order key: one may run, the rest wait in arrival order.
  struct Lane {
    std::deque<std::pair<const Route*, std::shared_ptr<Call>>> waiting;
  };

  void dispatch(rpc::Request request);
  void handle_response(const rpc::Response& response);
  void handle_cancelled(const json& params);
  void send(const json& message);
  void forget(const Call& call);
  void finishing(int delta);
  void run_handler(const Route& route, std::shared_ptr<Call> call);
  bool runs_inline(const Route& route, const Call& call) const;
  std::optional<std::string> order_key(const Route& route, const Call& call) const;
  // True when call may start now; false when it waits in its lane.
  bool enter_lane(const Route& route, const std::shared_ptr<Call>& call);
  void release_lane(const std::string& key);
  void pace(std::shared_ptr<Call> call);
  void defer(std::shared_ptr<Call> call);
  void pacer_main();

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
  std::mutex lanes_mutex_;
  std::map<std::string, Lane> lanes_;  // a key is present while one of its calls runs
  // The pacer: a thread that sends held progress, heartbeats and deferred
  // replies of the calls that carry a progressToken.
  std::mutex pacer_mutex_;
  std::condition_variable pacer_wake_;
  std::vector<std::weak_ptr<Call>> paced_;
  std::vector<std::shared_ptr<Call>> deferred_;  // calls whose reply waits
  bool pacer_dirty_ = false;  // paced_ or deferred_ grew
  bool pacer_flush_ = false;  // shutting down: deferred replies go now
  bool pacer_stop_ = false;
  std::thread pacer_;
};

}  // namespace agentbox::server
