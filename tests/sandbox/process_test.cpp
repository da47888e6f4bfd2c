// Background processes through the agent: start, output paging with waits
// and patterns, wait for exit or a port, signals, stdin, bounded buffers.
#include "fixture.h"

#include <future>
#include <thread>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

TEST_CASE("a background process runs, is listed, and its output stays readable after it exits") {
  SandboxFixture f;
  f.exec("export WHO=session-var; greet() { echo \"hi $1\"; }");
  auto started = f.call("process.start", {{"command", "greet $WHO; echo oops >&2; sleep 0.3; echo bye; exit 5"}});
  std::string id = started["process_id"];
  CHECK(started["status"] == "running");
  CHECK(started["pid"].get<int>() > 0);
  auto list = f.call("process.list", json::object());
  REQUIRE(list["processes"].size() == 1);
  CHECK(list["processes"][0]["process_id"] == id);
  auto waited = f.call("process.wait", {{"process_id", id}, {"timeout_ms", 5000}});
  CHECK(waited["status"] == "exited");
  CHECK(waited["exit_code"] == 5);
  CHECK(waited["timed_out"] == false);
  auto out = f.call("process.output", {{"process_id", id}, {"wait_ms", 1000}});
  CHECK(out["stdout"] == "hi session-var\nbye\n");
  CHECK(out["stderr"] == "oops\n");
  CHECK(out["next_offset"] == 19);
  auto again = f.call("process.output", {{"process_id", id}, {"offset", 15}});
  CHECK(again["stdout"] == "bye\n");
}

TEST_CASE("process_start queues behind a running exec and sees the state it leaves") {
  SandboxFixture f;
  for (int round = 0; round < 5; ++round) {
    // The exec's state is saved after its reply: a process started at once
    // must still see it, not the state before.
    std::string dir = "/workspace/d" + std::to_string(round);
    f.exec("mkdir -p " + dir + " && cd " + dir + " && export ROUND=" + std::to_string(round) +
           "; big_fn_" + std::to_string(round) + "() { echo fn; }");
    auto started = f.call("process.start", {{"command", "echo \"$PWD $ROUND $(big_fn_" + std::to_string(round) + ")\""}});
    auto out = f.call("process.output", {{"process_id", started["process_id"]}, {"wait_ms", 5000}, {"pattern", "fn"}});
    CHECK(out["stdout"] == dir + " " + std::to_string(round) + " fn\n");
  }
  // A process started while a command runs in the same session waits for it.
  auto running = std::async(std::launch::async, [&] { return f.exec("sleep 0.5; export LATER=yes"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto started = f.call("process.start", {{"command", "echo \"later=$LATER\""}});
  // The exec's reply and the start's reply leave the agent in that order, but
  // reach this thread through different callbacks: allow a moment. Without the
  // queueing the start would return ~400 ms before the exec ends.
  CHECK(running.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready);
  auto out = f.call("process.output", {{"process_id", started["process_id"]}, {"wait_ms", 5000}, {"pattern", "later"}});
  CHECK(out["stdout"] == "later=yes\n");
  // Another session is not held up by it.
  f.call("session.create", {{"name", "other"}});
  auto busy = std::async(std::launch::async, [&] { return f.exec("sleep 1"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t = std::chrono::steady_clock::now();
  f.call("process.start", {{"command", "true"}, {"session", "other"}});
  CHECK(std::chrono::steady_clock::now() - t < std::chrono::milliseconds(800));
  busy.get();
}

TEST_CASE("process_output waits for a pattern") {
  SandboxFixture f;
  auto id = f.call("process.start", {{"command", "sleep 0.5; echo 'Server listening on 8080'; sleep 60"}})["process_id"];
  auto start = std::chrono::steady_clock::now();
  auto out = f.call("process.output", {{"process_id", id}, {"wait_ms", 10000}, {"pattern", "listening on \\d+"}});
  CHECK(out["matched"] == true);
  CHECK(out["status"] == "running");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THROWS_AS(f.call("process.output", {{"process_id", id}, {"pattern", "("}}), SandboxError);
}

TEST_CASE("process_wait sees a port accept connections, and times out as a normal result") {
  SandboxFixture f;
  auto id = f.call("process.start", {{"command", "sleep 0.3; exec python3 -m http.server 8765 --bind 127.0.0.1"}})["process_id"];
  auto ready = f.call("process.wait", {{"process_id", id}, {"port", 8765}, {"timeout_ms", 15000}});
  CHECK(ready["port_ready"] == true);
  CHECK(ready["status"] == "running");
  CHECK(f.exec("python3 -c \"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8765/').status)\"")["stdout"] == "200\n");
  auto timeout = f.call("process.wait", {{"process_id", id}, {"timeout_ms", 200}});
  CHECK(timeout["timed_out"] == true);
  CHECK(timeout["status"] == "running");
}

TEST_CASE("process_kill signals the whole tree; SIGKILL ends it for certain") {
  SandboxFixture f;
  auto id = f.call("process.start", {{"command", "trap 'echo got-term; exit 0' TERM; setsid sleep 900 & while :; do sleep 0.1; done"}})["process_id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto killed = f.call("process.kill", {{"process_id", id}, {"signal", "SIGTERM"}});
  CHECK(killed["status"] == "exited");
  CHECK(f.call("process.output", {{"process_id", id}})["stdout"] == "got-term\n");

  auto stubborn = f.call("process.start", {{"command", "trap '' TERM; setsid sleep 901 & while :; do sleep 0.1; done"}})["process_id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto result = f.call("process.kill", {{"process_id", stubborn}, {"signal", 9}});
  CHECK(result["status"] == "killed");
  CHECK(f.exec("pgrep -c -f 'sleep 90[01]' || true")["stdout"] == "0\n");
  CHECK_THROWS_AS(f.call("process.kill", {{"process_id", stubborn}, {"signal", "SIGBOGUS"}}), SandboxError);
  CHECK_THROWS_AS(f.call("process.kill", {{"process_id", "proc-999"}}), SandboxError);
}

TEST_CASE("process_write feeds stdin; eof lets the program finish") {
  SandboxFixture f;
  auto id = f.call("process.start", {{"command", "sort"}})["process_id"];
  CHECK(f.call("process.write", {{"process_id", id}, {"data", "pear\napple\n"}})["bytes_written"] == 11);
  f.call("process.write", {{"process_id", id}, {"data", "fig\n"}, {"eof", true}});
  auto waited = f.call("process.wait", {{"process_id", id}, {"timeout_ms", 5000}});
  CHECK(waited["exit_code"] == 0);
  CHECK(f.call("process.output", {{"process_id", id}})["stdout"] == "apple\nfig\npear\n");
  CHECK_THROWS_AS(f.call("process.write", {{"process_id", id}, {"data", "x"}}), SandboxError);
}

TEST_CASE("a process's output buffer is bounded and says what it dropped") {
  ManagerOptions options;
  options.limits.process_head_bytes = 1000;
  options.limits.process_tail_bytes = 4000;
  SandboxFixture f(options);
  auto id = f.call("process.start", {{"command", "head -c 50000000 /dev/zero | tr '\\0' x; echo END"}})["process_id"];
  f.call("process.wait", {{"process_id", id}, {"timeout_ms", 30000}});
  auto out = f.call("process.output", {{"process_id", id}, {"offset", 1000}});
  CHECK(out["stdout_bytes"] == 50000004);
  std::string text = out["stdout"];
  CHECK(text.find("bytes were dropped") != std::string::npos);
  CHECK(text.substr(text.size() - 4) == "END\n");
  CHECK(text.size() < 5000);
}

TEST_CASE("process_output's pattern over a 200 KB line neither kills nor hangs the agent", "[wall]") {
  // A box's output is an attacker's input: std::regex overflowed its stack
  // on `a.*z` over such a line (the agent died) and never ended on `(a*)*b`.
  SandboxFixture f;
  auto id = f.call("process.start",
                   {{"command", "python3 -c \"print('a' * 200000 + 'z'); print('ready')\"; sleep 60"}})["process_id"];
  auto out = f.call("process.output", {{"process_id", id}, {"wait_ms", 10000}, {"pattern", "a.*z|^ready"}});
  CHECK(out["matched"] == true);
  auto start = std::chrono::steady_clock::now();
  auto none = f.call("process.output", {{"process_id", id}, {"wait_ms", 1000}, {"pattern", "(a*)*b"}});
  CHECK(none["matched"] == false);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(f.exec("echo alive")["stdout"] == "alive\n");
}
