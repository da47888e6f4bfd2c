// exec {yield_ms}: a command still running at yield_ms is answered with its
// output so far and a process id, and goes on under the process tools; its
// session keeps the state the command leaves (it ran in the session's shell).
#include "fixture.h"

#include <chrono>
#include <future>
#include <thread>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

TEST_CASE("an exec that outlives yield_ms answers early and goes on as a process", "[yield]") {
  SandboxFixture f;
  auto start = std::chrono::steady_clock::now();
  auto r = f.exec("echo begun; sleep 1.5; echo ended >&2; cd /tmp; export LEFT=behind", {{"yield_ms", 300}});
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < std::chrono::milliseconds(1200));
  REQUIRE(r.value("running", false) == true);
  CHECK_FALSE(r.contains("exit_code"));
  CHECK(r["stdout"] == "begun\n");
  std::string id = r["process_id"];
  CHECK(id.rfind("exec-", 0) == 0);
  auto listed = f.call("process.list", json::object());
  bool seen = false;
  for (const auto& p : listed["processes"]) seen |= p["process_id"] == id && p["status"] == "running";
  CHECK(seen);
  // Its output goes on under its id, from where the answer left off.
  auto out = f.call("process.output", {{"process_id", id}, {"offset", r["next_offset"]}, {"stderr_offset", r["stderr_next_offset"]},
                                       {"wait_ms", 10000}, {"pattern", "^ended"}});
  CHECK(out["matched"] == true);
  CHECK(out["stderr"] == "ended\n");
  auto waited = f.call("process.wait", {{"process_id", id}, {"timeout_ms", 10000}});
  CHECK(waited["status"] == "exited");
  CHECK(waited["exit_code"] == 0);
  // It ran in the session's shell: cd and export stay, as for any exec.
  CHECK(f.exec("echo $PWD $LEFT")["stdout"] == "/tmp behind\n");
}

TEST_CASE("an exec that ends before yield_ms is an ordinary result", "[yield]") {
  SandboxFixture f;
  auto r = f.exec("echo quick; exit 3", {{"yield_ms", 5000}});
  CHECK_FALSE(r.contains("running"));
  CHECK(r["exit_code"] == 3);
  CHECK(r["stdout"] == "quick\n");
  // A bad cwd is still an error, not a process.
  CHECK_THROWS_AS(f.exec("true", {{"yield_ms", 100}, {"cwd", "/nowhere"}}), SandboxError);
}

TEST_CASE("process_kill ends a yielded exec's tree and the session comes back", "[yield]") {
  SandboxFixture f;
  f.exec("export KEPT=yes");
  auto r = f.exec("setsid sleep 997 & exec -a yield-marker sleep 998", {{"yield_ms", 200}});
  REQUIRE(r.value("running", false) == true);
  f.call("session.create", {{"name", "other"}});
  // Another session is not held up by it.
  auto t = std::chrono::steady_clock::now();
  CHECK(f.exec("pgrep -fc yield-marker", {{"session", "other"}})["stdout"] == "1\n");
  CHECK(std::chrono::steady_clock::now() - t < std::chrono::seconds(3));
  auto killed = f.call("process.kill", {{"process_id", r["process_id"]}, {"signal", "SIGKILL"}});
  CHECK(killed["status"] == "killed");
  CHECK(f.exec("pgrep -c sleep || true", {{"session", "other"}})["stdout"] == "0\n");
  // The session is as it was after its previous command.
  CHECK(f.exec("echo $KEPT")["stdout"] == "yes\n");
  // A killed exec is not killed again, and its output stays readable.
  auto again = f.call("process.kill", {{"process_id", r["process_id"]}});
  CHECK(again["status"] == "killed");
}

TEST_CASE("a yielded exec still obeys its timeout", "[yield]") {
  SandboxFixture f;
  auto r = f.exec("sleep 30", {{"yield_ms", 100}, {"timeout_ms", 800}});
  REQUIRE(r.value("running", false) == true);
  auto waited = f.call("process.wait", {{"process_id", r["process_id"]}, {"timeout_ms", 10000}});
  CHECK(waited["status"] == "exited");
  CHECK(waited["exit_code"] == 124);
  CHECK(f.exec("echo fine")["stdout"] == "fine\n");
}
