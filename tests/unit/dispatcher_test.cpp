// server/dispatcher: everything requests have in common, observed through an
// Output that records what the server would have written to stdout.
#include "server/dispatcher.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using agentbox::rpc::ErrorCode;
using agentbox::server::Call;
using agentbox::server::Dispatcher;
using agentbox::server::ProtocolError;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace rpc = agentbox::rpc;
namespace server = agentbox::server;

namespace {

class RecordingOutput : public server::Output {
 public:
  void send(const json& message) override {
    std::lock_guard lock(mutex_);
    messages_.push_back(message);
    arrived_.notify_all();
  }

  std::vector<json> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }

  // The messages once at least n have arrived, or whatever is there after the
  // timeout (the caller's checks then fail).
  std::vector<json> wait_for(std::size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, timeout, [&] { return messages_.size() >= n; });
    return messages_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<json> messages_;
};

json request(const json& id, const std::string& method, json params = nullptr) {
  return rpc::make_request(id, method, params);
}

json modern_params(const std::string& version = "2026-07-28") {
  return {{"_meta", {{std::string(server::kMetaProtocolVersion), version}}}};
}

json with_progress_token(const json& token) { return {{"_meta", {{"progressToken", token}}}}; }

struct Fixture {
  RecordingOutput output;
  // Progress unpaced (sent when reported, no heartbeat, no wait before the
  // reply): the pacing has tests of its own below.
  Dispatcher dispatcher{output, {.workers = 4, .progress_delay = 0ms, .heartbeat = 1h, .quiet_gap = 0ms}};
  // A call a handler kept without answering, for tests that answer it later.
  // Declared after the dispatcher so it is released first.
  std::shared_ptr<Call> kept;

  void send(const json& message) { dispatcher.handle_line(rpc::serialize(message)); }

  void on(const std::string& method, Dispatcher::RequestHandler handler,
          Dispatcher::Gate gate = Dispatcher::Gate::Open, Dispatcher::Run run = Dispatcher::Run::Inline) {
    dispatcher.on_request(method, run, gate, std::move(handler));
  }

  // A route whose handler keeps its call unanswered in `kept`.
  void keep_calls(const std::string& method) {
    on(method, [this](std::shared_ptr<Call> call) { kept = std::move(call); });
  }

  json only_message() {
    auto messages = output.messages();
    REQUIRE(messages.size() == 1);
    return messages[0];
  }
};

void require_error(const json& message, const json& id, ErrorCode code) {
  INFO(message.dump());
  REQUIRE(message.contains("error"));
  CHECK(message["id"] == id);
  CHECK(message["error"]["code"] == static_cast<int>(code));
  CHECK_FALSE(message.contains("result"));
}

}  // namespace

TEST_CASE_METHOD(Fixture, "a known method is answered with its result", "[dispatcher]") {
  on("echo", [](std::shared_ptr<Call> call) { call->reply(json{{"got", call->params()}}); });
  send(request(1, "echo", {{"x", 1}}));
  CHECK(only_message() == rpc::make_result(1, json{{"got", {{"x", 1}}}}));
  CHECK(dispatcher.in_flight() == 0);
}

TEST_CASE_METHOD(Fixture, "an unknown method is -32601 naming the method", "[dispatcher]") {
  send(request("a", "no/such"));
  auto reply = only_message();
  require_error(reply, "a", ErrorCode::MethodNotFound);
  CHECK(reply["error"]["data"]["method"] == "no/such");
}

TEST_CASE_METHOD(Fixture, "gated methods answer -32002 until the server is initialized", "[dispatcher]") {
  int runs = 0;
  on("tools/list", [&](std::shared_ptr<Call> call) {
    ++runs;
    call->reply(json::object());
  }, Dispatcher::Gate::Initialized);
  on("ping", [](std::shared_ptr<Call> call) { call->reply(json::object()); });

  send(request(1, "tools/list"));
  send(request(2, "ping"));
  auto before = output.messages();
  REQUIRE(before.size() == 2);
  require_error(before[0], 1, server::mcp_error::ServerNotInitialized);
  CHECK(before[1] == rpc::make_result(2, json::object()));
  CHECK(runs == 0);

  dispatcher.set_initialized();
  send(request(3, "tools/list"));
  auto after = output.messages();
  REQUIRE(after.size() == 3);
  CHECK(after[2] == rpc::make_result(3, json::object()));
  CHECK(runs == 1);
}

TEST_CASE_METHOD(Fixture, "a modern-era request passes the gate and its result is marked complete", "[dispatcher]") {
  bool modern = false;
  on("tools/list", [&](std::shared_ptr<Call> call) {
    modern = call->modern();
    call->reply(json{{"tools", json::array()}});
  }, Dispatcher::Gate::Initialized);

  send(request(1, "tools/list", modern_params()));
  auto reply = only_message();
  CHECK(modern);
  CHECK(reply["result"] == json{{"tools", json::array()}, {"resultType", "complete"}});
}

TEST_CASE_METHOD(Fixture, "legacy results carry no resultType", "[dispatcher]") {
  on("ping", [](std::shared_ptr<Call> call) { call->reply(json::object()); });
  send(request(1, "ping"));
  CHECK_FALSE(only_message()["result"].contains("resultType"));
}

TEST_CASE_METHOD(Fixture, "an unsupported modern version is -32022 listing the supported ones", "[dispatcher]") {
  bool ran = false;
  on("ping", [&](std::shared_ptr<Call> call) {
    ran = true;
    call->reply(json::object());
  });
  send(request(4, "ping", modern_params("2099-01-01")));
  auto reply = only_message();
  require_error(reply, 4, server::mcp_error::UnsupportedProtocolVersion);
  CHECK(reply["error"]["data"]["supported"] == server::supported_versions_json());
  CHECK(reply["error"]["data"]["requested"] == "2099-01-01");
  CHECK_FALSE(ran);
}

TEST_CASE_METHOD(Fixture, "malformed _meta is -32602 and the handler does not run", "[dispatcher]") {
  bool ran = false;
  on("ping", [&](std::shared_ptr<Call> call) {
    ran = true;
    call->reply(json::object());
  });
  send(request(5, "ping", {{"_meta", "oops"}}));
  auto reply = only_message();
  require_error(reply, 5, ErrorCode::InvalidParams);
  CHECK(reply["error"]["data"]["field"] == "params._meta");
  CHECK_FALSE(ran);
}

TEST_CASE_METHOD(Fixture, "a handler throwing ProtocolError is answered with that error", "[dispatcher]") {
  on("strict", [](std::shared_ptr<Call>) {
    throw ProtocolError(ErrorCode::InvalidParams, "params.x: is required", json{{"field", "params.x"}});
  });
  send(request(6, "strict"));
  auto reply = only_message();
  require_error(reply, 6, ErrorCode::InvalidParams);
  CHECK(reply["error"]["message"] == "params.x: is required");
  CHECK(reply["error"]["data"] == json{{"field", "params.x"}});
}

TEST_CASE_METHOD(Fixture, "a handler throwing anything else is an internal error", "[dispatcher]") {
  on("broken", [](std::shared_ptr<Call>) { throw std::runtime_error("disk on fire"); });
  send(request(7, "broken"));
  auto reply = only_message();
  require_error(reply, 7, ErrorCode::InternalError);
  CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("disk on fire"));
  CHECK(dispatcher.in_flight() == 0);
}

TEST_CASE_METHOD(Fixture, "a handler that drops its call without answering gets an internal error reply",
                 "[dispatcher]") {
  on("forgetful", [](std::shared_ptr<Call>) {});
  send(request(8, "forgetful"));
  auto reply = only_message();
  require_error(reply, 8, ErrorCode::InternalError);
  CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("dropped"));
  CHECK(dispatcher.in_flight() == 0);
}

TEST_CASE_METHOD(Fixture, "a second answer to the same call is dropped", "[dispatcher]") {
  on("twice", [](std::shared_ptr<Call> call) {
    call->reply(json{{"n", 1}});
    call->reply(json{{"n", 2}});
    call->reply_error({ErrorCode::InternalError, "late", nullptr});
  });
  send(request(9, "twice"));
  CHECK(only_message() == rpc::make_result(9, json{{"n", 1}}));
}

TEST_CASE_METHOD(Fixture, "a throw after the answer does not produce a second message", "[dispatcher]") {
  on("reply-then-throw", [](std::shared_ptr<Call> call) {
    call->reply(json::object());
    throw std::runtime_error("after the fact");
  });
  send(request(10, "reply-then-throw"));
  CHECK(only_message() == rpc::make_result(10, json::object()));
}

TEST_CASE_METHOD(Fixture, "cancellation suppresses the reply and runs the on_cancel hooks", "[dispatcher]") {
  keep_calls("slow");
  send(request(11, "slow"));
  REQUIRE(kept);
  int hooks = 0;
  kept->on_cancel([&] { ++hooks; });
  kept->on_cancel([&] { ++hooks; });
  CHECK(dispatcher.in_flight() == 1);

  send(rpc::make_notification("notifications/cancelled", {{"requestId", 11}, {"reason", "user pressed stop"}}));
  CHECK(kept->cancelled());
  CHECK(hooks == 2);

  // A hook registered after the cancellation runs at once.
  kept->on_cancel([&] { ++hooks; });
  CHECK(hooks == 3);

  // A repeated cancel does not run the hooks again.
  send(rpc::make_notification("notifications/cancelled", {{"requestId", 11}}));
  CHECK(hooks == 3);

  kept->reply(json{{"too", "late"}});
  CHECK(output.messages().empty());
  CHECK(dispatcher.in_flight() == 0);
}

TEST_CASE_METHOD(Fixture, "a cancelled call dropped without an answer sends nothing and leaves nothing in flight",
                 "[dispatcher]") {
  keep_calls("slow");
  send(request(12, "slow"));
  send(rpc::make_notification("notifications/cancelled", {{"requestId", 12}}));
  kept.reset();
  CHECK(output.messages().empty());
  CHECK(dispatcher.in_flight() == 0);
}

TEST_CASE_METHOD(Fixture, "cancellation matches the id exactly, type included", "[dispatcher]") {
  keep_calls("slow");
  send(request(13, "slow"));
  send(rpc::make_notification("notifications/cancelled", {{"requestId", "13"}}));
  send(rpc::make_notification("notifications/cancelled", {{"reason", "no id"}}));
  send(rpc::make_notification("notifications/cancelled", {{"requestId", 999}}));
  CHECK_FALSE(kept->cancelled());
  kept->reply(json::object());
  CHECK(only_message() == rpc::make_result(13, json::object()));
}

TEST_CASE_METHOD(Fixture, "a cancel that arrives after the answer changes nothing", "[dispatcher]") {
  keep_calls("slow");
  send(request(14, "slow"));
  int hooks = 0;
  kept->on_cancel([&] { ++hooks; });
  kept->reply(json::object());
  send(rpc::make_notification("notifications/cancelled", {{"requestId", 14}}));
  kept->cancel("direct");
  CHECK(hooks == 0);
  CHECK_FALSE(kept->cancelled());
  CHECK(only_message() == rpc::make_result(14, json::object()));
}

TEST_CASE_METHOD(Fixture, "progress needs a token", "[dispatcher]") {
  keep_calls("work");
  send(request(15, "work"));
  kept->progress(1, 10, "one");
  kept->reply(json::object());
  CHECK(only_message() == rpc::make_result(15, json::object()));
}

TEST_CASE_METHOD(Fixture, "progress is strictly increasing and stops at the answer", "[dispatcher]") {
  keep_calls("work");
  send(request(16, "work", with_progress_token("tok-1")));
  kept->progress(0.5, 4, "first");
  kept->progress(3, 4, "three");
  kept->progress(3, 4, "repeat");  // not an increase: the next whole number, no total
  kept->progress(1, 4, "back");    // a decrease: the same
  kept->progress(0, std::nullopt, "");  // no total: the next whole number
  kept->reply(json::object());
  kept->progress(9, 10, "after the answer");

  auto messages = output.messages();
  REQUIRE(messages.size() == 6);
  auto note = [](json params) {
    params["progressToken"] = "tok-1";
    return rpc::make_notification("notifications/progress", params);
  };
  CHECK(messages[0] == note({{"progress", 0.5}, {"total", 4}, {"message", "first"}}));
  CHECK(messages[1] == note({{"progress", 3}, {"total", 4}, {"message", "three"}}));
  CHECK(messages[2] == note({{"progress", 4}, {"message", "repeat"}}));
  CHECK(messages[3] == note({{"progress", 5}, {"message", "back"}}));
  CHECK(messages[4] == note({{"progress", 6}}));
  CHECK(messages[5] == rpc::make_result(16, json::object()));
}

TEST_CASE_METHOD(Fixture, "integer progress tokens are echoed as integers, and none after a cancel", "[dispatcher]") {
  keep_calls("work");
  send(request(17, "work", with_progress_token(77)));
  kept->progress(1, std::nullopt, "");
  send(rpc::make_notification("notifications/cancelled", {{"requestId", 17}}));
  kept->progress(2, std::nullopt, "");
  auto messages = output.messages();
  REQUIRE(messages.size() == 1);
  CHECK(messages[0]["params"]["progressToken"] == 77);
}

TEST_CASE_METHOD(Fixture, "an id already in flight is refused, and free again once answered", "[dispatcher]") {
  keep_calls("slow");
  send(request("dup", "slow"));
  auto first = kept;
  send(request("dup", "slow"));
  CHECK(kept == first);  // the handler did not run for the duplicate
  auto refusal = only_message();
  require_error(refusal, "dup", ErrorCode::InvalidRequest);
  CHECK_THAT(refusal["error"]["message"].get<std::string>(), Catch::Contains("already in use"));

  first->reply(json{{"n", 1}});
  first.reset();
  kept.reset();
  send(request("dup", "slow"));
  REQUIRE(kept);
  kept->reply(json{{"n", 2}});
  auto messages = output.messages();
  REQUIRE(messages.size() == 3);
  CHECK(messages[1] == rpc::make_result("dup", json{{"n", 1}}));
  CHECK(messages[2] == rpc::make_result("dup", json{{"n", 2}}));
}

TEST_CASE_METHOD(Fixture, "ids 1 and \"1\" are different requests", "[dispatcher]") {
  std::vector<std::shared_ptr<Call>> calls;
  on("slow", [&](std::shared_ptr<Call> call) { calls.push_back(std::move(call)); });
  send(request(1, "slow"));
  send(request("1", "slow"));
  CHECK(calls.size() == 2);
  CHECK(output.messages().empty());
  for (auto& call : calls) call->reply(json::object());
  calls.clear();
}

TEST_CASE_METHOD(Fixture, "an oversized line is answered with -32600 and its size", "[dispatcher]") {
  dispatcher.handle_oversized(100, 16);
  auto reply = only_message();
  require_error(reply, nullptr, ErrorCode::InvalidRequest);
  CHECK(reply["error"]["data"] == json{{"bytes", 100}, {"limit", 16}});
  CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("100 bytes"));
}

TEST_CASE("a reply over the message limit becomes an internal error", "[dispatcher]") {
  RecordingOutput output;
  Dispatcher dispatcher(output, {.workers = 1, .max_message_bytes = 200});
  dispatcher.on_request("big", Dispatcher::Run::Inline, Dispatcher::Gate::Open,
                        [](std::shared_ptr<Call> call) { call->reply(json{{"text", std::string(500, 'x')}}); });
  dispatcher.handle_line(rpc::serialize(request(1, "big")));
  auto messages = output.messages();
  REQUIRE(messages.size() == 1);
  require_error(messages[0], 1, ErrorCode::InternalError);
  CHECK_THAT(messages[0]["error"]["message"].get<std::string>(), Catch::Contains("200 byte"));
}

TEST_CASE("a reply over the message limit is replaced by the call's own result when it names one", "[dispatcher]") {
  // tools/call: an INTERNAL error result the model can read, not -32603.
  RecordingOutput output;
  Dispatcher dispatcher(output, {.workers = 1, .max_message_bytes = 200});
  dispatcher.on_request("big", Dispatcher::Run::Inline, Dispatcher::Gate::Open, [](std::shared_ptr<Call> call) {
    call->on_oversized([](std::size_t bytes, std::size_t limit) {
      return json{{"isError", true}, {"bytes", bytes}, {"limit", limit}};
    });
    call->reply(json{{"text", std::string(500, 'x')}});
  });
  dispatcher.handle_line(rpc::serialize(request(1, "big")));
  auto messages = output.messages();
  REQUIRE(messages.size() == 1);
  INFO(messages[0].dump());
  REQUIRE(messages[0].contains("result"));
  CHECK(messages[0]["result"]["isError"] == true);
  CHECK(messages[0]["result"]["limit"] == 200);
  CHECK(messages[0]["result"]["bytes"].get<std::size_t>() > 500);
}

TEST_CASE_METHOD(Fixture, "lines that are not messages are answered with their error", "[dispatcher]") {
  dispatcher.handle_line("{not json");
  dispatcher.handle_line(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  dispatcher.handle_line(R"({"jsonrpc":"2.0","id":3,"method":7})");
  auto messages = output.messages();
  REQUIRE(messages.size() == 3);
  require_error(messages[0], nullptr, ErrorCode::ParseError);
  require_error(messages[1], nullptr, ErrorCode::InvalidRequest);
  require_error(messages[2], 3, ErrorCode::InvalidRequest);
}

TEST_CASE_METHOD(Fixture, "unsolicited responses and unknown notifications are ignored silently", "[dispatcher]") {
  dispatcher.handle_line(R"({"jsonrpc":"2.0","id":1,"result":{}})");
  dispatcher.handle_line(R"({"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}})");
  send(rpc::make_notification("notifications/whatever", json::object()));
  CHECK(output.messages().empty());
}

TEST_CASE_METHOD(Fixture, "notification handlers get their params and may throw", "[dispatcher]") {
  json seen;
  dispatcher.on_notification("notifications/a", [&](const json& params) { seen = params; });
  dispatcher.on_notification("notifications/b", [](const json&) { throw std::runtime_error("bad"); });
  send(rpc::make_notification("notifications/a", {{"k", 1}}));
  REQUIRE_NOTHROW(send(rpc::make_notification("notifications/b", nullptr)));
  CHECK(seen == json{{"k", 1}});
  CHECK(output.messages().empty());
}

TEST_CASE_METHOD(Fixture, "pooled handlers run off the reader thread, concurrently", "[dispatcher]") {
  std::mutex mutex;
  std::condition_variable cv;
  int started = 0;
  auto reader = std::this_thread::get_id();
  on("meet", [&](std::shared_ptr<Call> call) {
    std::unique_lock lock(mutex);
    ++started;
    cv.notify_all();
    // Serial handlers would each wait out the timeout alone and see 1.
    bool met = cv.wait_for(lock, 2s, [&] { return started >= 2; });
    lock.unlock();
    call->reply(json{{"met", met}, {"off_reader", std::this_thread::get_id() != reader}});
  }, Dispatcher::Gate::Open, Dispatcher::Run::Pooled);

  send(request(1, "meet"));
  send(request(2, "meet"));
  auto messages = output.wait_for(2);
  // The handlers use this test's locals until they return.
  dispatcher.shutdown();
  REQUIRE(messages.size() == 2);
  for (const auto& message : messages) CHECK(message["result"] == json{{"met", true}, {"off_reader", true}});
}

TEST_CASE_METHOD(Fixture, "a pooled method runs inline for the requests its predicate picks", "[dispatcher]") {
  auto reader = std::this_thread::get_id();
  dispatcher.on_request(
      "op",
      Dispatcher::Run::Pooled, Dispatcher::Gate::Open,
      [reader](std::shared_ptr<Call> call) {
        call->reply(json{{"on_reader", std::this_thread::get_id() == reader}});
      },
      [](const json& params) {
        // A predicate that throws on some input must not take the reader down.
        if (params.is_object() && params.contains("boom")) throw std::runtime_error("boom");
        return params.is_object() && params.value("quick", false);
      });

  send(request(1, "op", {{"quick", true}}));
  // An inline handler has answered before handle_line returns.
  REQUIRE(output.messages().size() == 1);
  CHECK(output.messages()[0]["result"] == json{{"on_reader", true}});
  send(request(2, "op", {{"quick", false}}));
  send(request(3, "op", {{"boom", 1}}));
  auto messages = output.wait_for(3);
  dispatcher.shutdown();
  REQUIRE(messages.size() == 3);
  for (std::size_t i = 1; i < 3; ++i) CHECK(messages[i]["result"] == json{{"on_reader", false}});
}

TEST_CASE_METHOD(Fixture, "shutdown cancels calls in flight and refuses new requests", "[dispatcher]") {
  keep_calls("slow");
  send(request(20, "slow"));
  bool hook_ran = false;
  // The tool answers when cancelled (shutdown waits for that); the answer is
  // suppressed because the call was cancelled.
  kept->on_cancel([&hook_ran, call = kept.get()] {
    hook_ran = true;
    call->reply(json::object());
  });
  dispatcher.shutdown();
  CHECK(hook_ran);
  CHECK(dispatcher.in_flight() == 0);

  send(request(21, "slow"));
  auto reply = only_message();
  require_error(reply, 21, ErrorCode::InternalError);
  CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("shutting down"));
}

TEST_CASE("shutdown waits for calls still held by tool threads", "[dispatcher]") {
  // A tool that answers from its own thread, a little after being cancelled:
  // destroying the dispatcher before that answer would leave the thread
  // touching freed memory.
  RecordingOutput output;
  std::thread worker;
  std::atomic<bool> spawned{false};
  std::atomic<bool> answering{false};
  {
    Dispatcher dispatcher(output, {.workers = 1});
    dispatcher.on_request("async", Dispatcher::Run::Pooled, Dispatcher::Gate::Open, [&](std::shared_ptr<Call> call) {
      auto cancelled = std::make_shared<std::atomic<bool>>(false);
      call->on_cancel([cancelled] { cancelled->store(true); });
      worker = std::thread([call = std::move(call), cancelled, &answering]() mutable {
        while (!cancelled->load()) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(50ms);
        answering = true;
        call->reply(json::object());
        call.reset();
      });
      spawned = true;
    });
    dispatcher.handle_line(rpc::serialize(request(1, "async")));
    while (!spawned) std::this_thread::sleep_for(1ms);
    dispatcher.shutdown();
    CHECK(answering);
    CHECK(dispatcher.in_flight() == 0);
  }
  worker.join();
  CHECK(output.messages().empty());
}
