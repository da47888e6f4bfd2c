// server/dispatcher: progress pacing (docs/protocol.md, "Progress") and
// arrival order per order key (docs/protocol.md, "Order"), with real clocks.
#include "server/dispatcher.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using agentbox::server::Call;
using agentbox::server::Dispatcher;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace rpc = agentbox::rpc;
namespace server = agentbox::server;
using Clock = std::chrono::steady_clock;

namespace {

// Records what was written and when; "read" by the host only when told.
class TimedOutput : public server::Output {
 public:
  struct Sent {
    json message;
    Clock::time_point at;
  };
  void send(const json& message) override {
    std::lock_guard lock(mutex_);
    sent_.push_back({message, Clock::now()});
    written_ += rpc::serialize(message).size() + 1;
    arrived_.notify_all();
  }
  std::uint64_t written() const override {
    std::lock_guard lock(mutex_);
    return written_;
  }
  std::optional<bool> read_up_to(std::uint64_t mark) const override {
    std::lock_guard lock(mutex_);
    if (!knows_reads_) return std::nullopt;
    return read_ >= mark;
  }
  void host_reads_everything() {
    std::lock_guard lock(mutex_);
    read_ = written_;
  }
  void knows_reads(bool yes) {
    std::lock_guard lock(mutex_);
    knows_reads_ = yes;
  }
  std::vector<Sent> wait_for(std::size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, timeout, [&] { return sent_.size() >= n; });
    return sent_;
  }
  std::vector<Sent> sent() const {
    std::lock_guard lock(mutex_);
    return sent_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Sent> sent_;
  std::uint64_t written_ = 0, read_ = 0;
  bool knows_reads_ = false;
};

json call_with_token(const json& id, const std::string& method) {
  return rpc::make_request(id, method, json{{"_meta", {{"progressToken", "t"}}}});
}

bool is_progress(const TimedOutput::Sent& s) { return s.message.value("method", "") == "notifications/progress"; }

struct Paced {
  TimedOutput output;
  Dispatcher dispatcher{output, {.workers = 2, .progress_delay = 300ms, .heartbeat = 200ms, .read_wait_cap = 2s,
                                 .quiet_gap = 150ms}};
  std::shared_ptr<Call> kept;
  Paced() {
    dispatcher.on_request("work", Dispatcher::Run::Inline, Dispatcher::Gate::Open,
                          [this](std::shared_ptr<Call> call) { kept = std::move(call); });
  }
  void send(const json& message) { dispatcher.handle_line(rpc::serialize(message)); }
};

}  // namespace

TEST_CASE_METHOD(Paced, "a call answered within the delay sends no progress", "[dispatcher][progress]") {
  send(call_with_token(1, "work"));
  kept->progress(1, 3, "one");
  std::this_thread::sleep_for(100ms);
  kept->progress(2, 3, "two");
  kept->reply(json::object());
  std::this_thread::sleep_for(400ms);
  auto sent = output.sent();
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].message == rpc::make_result(1, json::object()));
}

TEST_CASE_METHOD(Paced, "what was reported in the delay is sent at its end, then heartbeats", "[dispatcher][progress]") {
  auto start = Clock::now();
  send(call_with_token(2, "work"));
  kept->progress(1, 4, "one");
  kept->progress(2, 4, "two");
  auto sent = output.wait_for(3, 2s);
  REQUIRE(sent.size() >= 3);
  // The latest report when the delay ends, then heartbeats with rising values.
  CHECK(sent[0].message["params"] == json{{"progressToken", "t"}, {"progress", 2}, {"total", 4}, {"message", "two"}});
  CHECK(sent[0].at - start >= 290ms);
  CHECK(sent[1].message["params"]["progress"] == 3);
  CHECK(sent[2].message["params"]["progress"] == 4);
  CHECK(sent[1].at - sent[0].at >= 190ms);
  CHECK_THAT(sent[1].message["params"]["message"].get<std::string>(), Catch::Contains("still running"));
  kept->reply(json::object());
}

TEST_CASE_METHOD(Paced, "a silent call gets a heartbeat once it is old enough", "[dispatcher][progress]") {
  send(call_with_token(3, "work"));
  auto sent = output.wait_for(1, 2s);
  REQUIRE(sent.size() == 1);
  CHECK(is_progress(sent[0]));
  CHECK(sent[0].message["params"]["progress"] == 1);
  kept->reply(json::object());
}

TEST_CASE_METHOD(Paced, "the reply waits a quiet gap after the last notification", "[dispatcher][progress]") {
  send(call_with_token(4, "work"));
  output.wait_for(1, 2s);
  kept->progress(5, 10, "late");  // sent at once: the delay is over
  kept->reply(json{{"done", true}});
  auto sent = output.wait_for(3, 2s);
  REQUIRE(sent.size() == 3);
  CHECK(is_progress(sent[1]));
  CHECK(sent[2].message == rpc::make_result(4, json{{"done", true}}));
  CHECK(sent[2].at - sent[1].at >= 140ms);
}

TEST_CASE_METHOD(Paced, "the reply waits until the host has read the notification", "[dispatcher][progress]") {
  output.knows_reads(true);
  send(call_with_token(5, "work"));
  output.wait_for(1, 2s);
  kept->reply(json::object());
  std::this_thread::sleep_for(300ms);  // longer than quiet_gap: the read is what counts
  REQUIRE(output.sent().size() == 1);
  output.host_reads_everything();
  auto sent = output.wait_for(2, 1s);
  REQUIRE(sent.size() == 2);
  CHECK(sent[1].message == rpc::make_result(5, json::object()));
}

TEST_CASE_METHOD(Paced, "shutdown sends a waiting reply at once", "[dispatcher][progress]") {
  output.knows_reads(true);
  send(call_with_token(6, "work"));
  output.wait_for(1, 2s);
  kept->reply(json::object());
  kept.reset();
  auto start = Clock::now();
  dispatcher.shutdown();
  CHECK(Clock::now() - start < 500ms);
  REQUIRE(output.sent().size() == 2);
}

namespace {

// A pooled route ordered by params.key; each call records when it ran and
// releases the order after `hold`.
struct Ordered {
  TimedOutput output;
  Dispatcher dispatcher{output, {.workers = 4}};
  std::mutex mutex;
  std::vector<int> ran;
  Ordered() {
    dispatcher.on_request(
        "job", Dispatcher::Run::Pooled, Dispatcher::Gate::Open,
        [this](std::shared_ptr<Call> call) {
          std::this_thread::sleep_for(std::chrono::milliseconds(call->params().value("hold", 0)));
          {
            std::lock_guard lock(mutex);
            ran.push_back(call->params().value("n", 0));
          }
          call->release_order();
          std::this_thread::sleep_for(std::chrono::milliseconds(call->params().value("after", 0)));
          call->reply(json::object());
        },
        {}, [](const json& params) -> std::optional<std::string> {
          if (!params.contains("key")) return std::nullopt;
          return params["key"].get<std::string>();
        });
  }
  void job(int n, json params) {
    params["n"] = n;
    dispatcher.handle_line(rpc::serialize(rpc::make_request(n, "job", params)));
  }
};

}  // namespace

TEST_CASE_METHOD(Ordered, "calls with one order key start in arrival order", "[dispatcher][order]") {
  // Earlier calls hold longer: a pool of four would finish them backwards.
  for (int n = 1; n <= 8; ++n) job(n, {{"key", "a"}, {"hold", (8 - n) * 10}});
  output.wait_for(8);
  std::lock_guard lock(mutex);
  CHECK(ran == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE_METHOD(Ordered, "the next call starts at the release, not at the reply", "[dispatcher][order]") {
  auto start = Clock::now();
  job(1, {{"key", "a"}, {"after", 400}});
  job(2, {{"key", "a"}});
  auto sent = output.wait_for(1);
  CHECK(sent[0].message["id"] == 2);
  CHECK(sent[0].at - start < 300ms);
  output.wait_for(2);
}

TEST_CASE_METHOD(Ordered, "other keys and unordered calls do not wait", "[dispatcher][order]") {
  auto start = Clock::now();
  job(1, {{"key", "a"}, {"hold", 400}});
  job(2, {{"key", "b"}});
  job(3, json::object());
  auto sent = output.wait_for(2);
  CHECK(sent[1].at - start < 300ms);
  output.wait_for(3);
}

TEST_CASE_METHOD(Ordered, "a call cancelled while it waits is dropped and the line moves on", "[dispatcher][order]") {
  job(1, {{"key", "a"}, {"hold", 200}});
  job(2, {{"key", "a"}});
  job(3, {{"key", "a"}});
  dispatcher.handle_line(rpc::serialize(rpc::make_notification("notifications/cancelled", {{"requestId", 2}})));
  auto sent = output.wait_for(2);
  std::this_thread::sleep_for(100ms);
  sent = output.sent();
  REQUIRE(sent.size() == 2);
  // Call 1 releases its line before its reply is written, so call 3's reply
  // may be written first: the order that matters is the order they ran in.
  std::set<json> ids{sent[0].message["id"], sent[1].message["id"]};
  CHECK(ids == std::set<json>{1, 3});
  std::lock_guard lock(mutex);
  CHECK(ran == std::vector<int>{1, 3});
}

TEST_CASE_METHOD(Ordered, "shutdown drops calls still waiting in their line", "[dispatcher][order]") {
  job(1, {{"key", "a"}, {"hold", 200}});
  job(2, {{"key", "a"}});
  auto start = Clock::now();
  dispatcher.shutdown();
  CHECK(Clock::now() - start < 1s);
  CHECK(dispatcher.in_flight() == 0);
}
