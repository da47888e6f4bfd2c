// exec through the agent: results, stdin, signals, timeouts and cancellation
// that kill whole trees (daemons included), output caps and streaming.
#include "fixture.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

namespace {

// Host-side check: no process anywhere on the host has marker in its command line.
bool host_has_process_with(const std::string& marker) {
  std::string out;
  // "[t]ree-marker" matches the marker but not this pgrep's own shell.
  std::string pattern = "[" + marker.substr(0, 1) + "]" + marker.substr(1);
  FILE* p = popen(("pgrep -f -- '" + pattern + "'").c_str(), "r");
  char buf[256];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return !out.empty();
}

}  // namespace

TEST_CASE("exec returns exit code, stdout and stderr separately") {
  SandboxFixture f;
  auto r = f.exec("echo out; echo err >&2; exit 7");
  CHECK(r["exit_code"] == 7);
  CHECK(r["stdout"] == "out\n");
  CHECK(r["stderr"] == "err\n");
  CHECK(r["success"] == false);
  CHECK(r["timed_out"] == false);
  CHECK(r["truncated"] == false);
  CHECK(r["duration_ms"].get<int>() >= 0);
}

TEST_CASE("stdin is empty unless given") {
  SandboxFixture f;
  auto r = f.exec("cat; echo done", {{"timeout_ms", 5000}});
  CHECK(r["stdout"] == "done\n");
  CHECK(r["timed_out"] == false);
  r = f.exec("tr a-z A-Z", {{"stdin", "hello\nworld\n"}});
  CHECK(r["stdout"] == "HELLO\nWORLD\n");
}

TEST_CASE("death by a signal gives 128+N and the signal's name") {
  SandboxFixture f;
  auto r = f.exec("sh -c 'kill -TERM $$'");
  CHECK(r["exit_code"] == 143);
  CHECK(r["signal"] == "SIGTERM");
  CHECK(r["success"] == false);
}

TEST_CASE("timeout kills the command tree, setsid daemons included, and keeps the session") {
  SandboxFixture f;
  f.exec("export BEFORE=kept; cd /tmp");
  auto start = std::chrono::steady_clock::now();
  auto r = f.exec("cd /; export BEFORE=changed; (sleep 1000 &) ; setsid sh -c 'exec -a tree-marker-daemon sleep 1001' & "
                  "sleep 1002",
                  {{"timeout_ms", 700}});
  auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(r["timed_out"] == true);
  CHECK(r["exit_code"] == 124);
  CHECK(r["success"] == false);
  CHECK(elapsed < std::chrono::seconds(5));
  auto ps = f.exec("ps -eo args | grep -c '^sleep 100[012]\\|[t]ree-marker-daemon' || true");
  CHECK(ps["stdout"] == "0\n");
  CHECK_FALSE(host_has_process_with("tree-marker-daemon"));
  // The session is as it was after the last completed command.
  CHECK(f.exec("echo $BEFORE; pwd")["stdout"] == "kept\n/tmp\n");
}

TEST_CASE("a busy loop in the shell itself is stopped by the timeout") {
  SandboxFixture f;
  auto r = f.exec("while :; do :; done", {{"timeout_ms", 500}});
  CHECK(r["timed_out"] == true);
  CHECK(f.exec("echo ok")["stdout"] == "ok\n");
}

TEST_CASE("cancellation kills the command and its tree") {
  SandboxFixture f;
  Lease lease = f.manager->acquire("test");
  std::promise<AgentClient::Outcome> done;
  auto id = lease.agent().call_async("exec", {{"command", "setsid sleep 999 & exec -a cancel-marker sleep 998"}, {"timeout_ms", 60000}},
                                     std::chrono::minutes(1), [&done](AgentClient::Outcome o) { done.set_value(std::move(o)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(host_has_process_with("cancel-marker"));
  lease.agent().cancel(id);
  auto future = done.get_future();
  REQUIRE(future.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  auto outcome = future.get();
  REQUIRE_FALSE(outcome.error);
  CHECK(outcome.result["cancelled"] == true);
  CHECK_FALSE(host_has_process_with("cancel-marker"));
  CHECK(f.exec("pgrep -c sleep || true")["stdout"] == "0\n");
}

TEST_CASE("background jobs of a finished command keep running without blocking it") {
  SandboxFixture f;
  auto r = f.exec("(sleep 0.5; while :; do echo spam; sleep 0.01; done) & echo started", {{"timeout_ms", 5000}});
  CHECK(r["stdout"] == "started\n");
  CHECK(r["timed_out"] == false);
  auto next = f.exec("echo clean");
  CHECK(next["stdout"] == "clean\n");  // the job's output does not leak into the next command
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(f.exec("jobs -rp | wc -l")["stdout"] == "1\n");  // the session's shell still runs the job
  CHECK(f.exec("echo clean")["stdout"] == "clean\n");
}

TEST_CASE("large output is capped inline and readable in full with process_output") {
  SandboxFixture f;
  auto r = f.exec("seq 1 100000");
  CHECK(r["truncated"] == true);
  std::string out = r["stdout"];
  // Shown twice (text and structuredContent), within the inline cap together.
  CHECK(out.size() < 15'500);
  CHECK(std::count(out.begin(), out.end(), '\n') <= 1'001);
  CHECK(out.rfind("1\n2\n3\n", 0) == 0);
  CHECK(out.find("100000\n") != std::string::npos);
  CHECK(out.find("bytes not shown here") != std::string::npos);
  CHECK(r["next_offset"] == out.find("\n[... ") + 1);
  std::string id = r["process_id"];
  std::string all;
  std::uint64_t offset = 0;
  for (int page = 0; page < 1000; ++page) {  // pages of at most 750 lines
    auto chunk = f.call("process.output", {{"process_id", id}, {"offset", offset}});
    all += chunk["stdout"].get<std::string>();
    if (chunk["next_offset"] == offset) break;
    offset = chunk["next_offset"];
  }
  std::string expected;
  for (int i = 1; i <= 100000; ++i) expected += std::to_string(i) + "\n";
  CHECK(all == expected);
}

TEST_CASE("output is streamed as notifications while the command runs") {
  SandboxFixture f;
  Lease lease = f.manager->acquire("test");
  std::atomic<int> notes{0};
  std::string streamed;
  std::mutex m;
  auto r = lease.agent().call("exec", {{"command", "for i in 1 2 3; do echo tick$i; sleep 0.3; done"}, {"stream", true}, {"timeout_ms", 10000}},
                              std::chrono::seconds(20), [&](const std::string& method, const json& params) {
                                if (method != "output") return;
                                ++notes;
                                std::lock_guard lock(m);
                                streamed += params["data"].get<std::string>();
                              });
  CHECK(r["stdout"] == "tick1\ntick2\ntick3\n");
  CHECK(notes >= 2);
  CHECK(streamed == "tick1\ntick2\ntick3\n");
}
