// Shell sessions through the agent: state that persists, isolation between
// sessions, ordering, and a shell that ends or is killed.
#include "fixture.h"

#include <algorithm>
#include <future>
#include <thread>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

TEST_CASE("cd, export, functions and aliases persist in a session") {
  SandboxFixture f;
  f.exec("mkdir -p /workspace/sub && cd /workspace/sub && export GREETING=hello && shout() { echo \"${1^^}\"; }"
         " && alias ll='echo listing'");
  auto r = f.exec("pwd; echo $GREETING; shout quiet; ll");
  CHECK(r["stdout"] == "/workspace/sub\nhello\nQUIET\nlisting\n");
  CHECK(r["exit_code"] == 0);
  CHECK(r["success"] == true);
  auto plain = f.exec("x=42; declare -a list=(a b)");
  CHECK(f.exec("echo $x ${list[1]}")["stdout"] == "42 b\n");
}

TEST_CASE("source of an activate script changes the session like a terminal") {
  SandboxFixture f;
  f.exec("mkdir -p venv/bin && printf 'export VIRTUAL_ENV=/workspace/venv\\nexport PATH=\"$VIRTUAL_ENV/bin:$PATH\"\\n"
         "deactivate() { unset VIRTUAL_ENV; }\\n' > venv/bin/activate && printf '#!/bin/sh\\necho venv-python\\n' > "
         "venv/bin/python && chmod +x venv/bin/python");
  f.exec("source venv/bin/activate");
  auto r = f.exec("python; echo $VIRTUAL_ENV; type -t deactivate");
  CHECK(r["stdout"] == "venv-python\n/workspace/venv\nfunction\n");
}

TEST_CASE("heredocs and multi-line scripts work") {
  SandboxFixture f;
  auto r = f.exec("cat <<'EOF' > notes.txt\nline one\n$NOT_EXPANDED\nEOF\nwc -l < notes.txt\ncat notes.txt");
  CHECK(r["stdout"] == "2\nline one\n$NOT_EXPANDED\n");
  r = f.exec("for i in 1 2 3; do\n  echo \"n=$i\"\ndone");
  CHECK(r["stdout"] == "n=1\nn=2\nn=3\n");
}

TEST_CASE("exit inside a command does not break the session") {
  SandboxFixture f;
  f.exec("export KEEP=yes; cd /tmp");
  auto r = f.exec("echo before; exit 3");
  CHECK(r["exit_code"] == 3);
  CHECK(r["stdout"] == "before\n");
  CHECK(r["success"] == false);
  CHECK(r.contains("notice"));
  auto after = f.exec("echo $KEEP; pwd");
  CHECK(after["stdout"] == "yes\n/tmp\n");
  CHECK(after["exit_code"] == 0);
  CHECK(f.exec("exec true")["exit_code"] == 0);
  CHECK(f.exec("echo alive")["stdout"] == "alive\n");
}

TEST_CASE("shell options survive a restarted shell, changed or back to their defaults") {
  SandboxFixture f;
  // Options are saved only when they differ from a fresh shell's.
  f.exec("shopt -s extglob nullglob; shopt -u expand_aliases; set -o pipefail -o noglob");
  f.exec("exit 0");  // the next command runs in a new shell, restored from the saved state
  auto r = f.exec("shopt -q extglob && shopt -q nullglob && ! shopt -q expand_aliases && echo shopt; "
                  "[[ $SHELLOPTS == *pipefail* && $SHELLOPTS == *noglob* ]] && echo set");
  CHECK(r["stdout"] == "shopt\nset\n");
  f.exec("shopt -u extglob nullglob; shopt -s expand_aliases; set +o pipefail +o noglob");
  f.exec("exit 0");
  r = f.exec("shopt -q extglob || shopt -q nullglob || echo off; shopt -q expand_aliases && echo aliases; "
             "[[ $SHELLOPTS != *pipefail* && $SHELLOPTS != *noglob* ]] && echo unset");
  CHECK(r["stdout"] == "off\naliases\nunset\n");
}

TEST_CASE("cwd and env given to one exec apply to that command only") {
  SandboxFixture f;
  auto r = f.exec("pwd; echo $ONLY_HERE", {{"cwd", "/tmp"}, {"env", {{"ONLY_HERE", "v a'l"}}}});
  CHECK(r["stdout"] == "/tmp\nv a'l\n");
  CHECK(f.exec("pwd; echo \"[$ONLY_HERE]\"")["stdout"] == "/workspace\n[]\n");
}

TEST_CASE("a missing cwd or session is an error, not a failed command") {
  SandboxFixture f;
  Lease lease = f.manager->acquire("test");
  try {
    lease.agent().call("exec", {{"command", "true"}, {"cwd", "/nope"}}, std::chrono::seconds(10));
    FAIL("exec with a missing cwd succeeded");
  } catch (const SandboxError& e) {
    CHECK(e.code() == codes::kInvalidCwd);
  }
  try {
    lease.agent().call("exec", {{"command", "true"}, {"session", "ghost"}}, std::chrono::seconds(10));
    FAIL("exec in an unknown session succeeded");
  } catch (const SandboxError& e) {
    CHECK(e.code() == codes::kSessionNotFound);
  }
}

TEST_CASE("sessions are created, listed, isolated and deleted") {
  SandboxFixture f;
  auto created = f.call("session.create", {{"name", "build"}, {"cwd", "/tmp"}, {"env", {{"MODE", "release"}}}});
  CHECK(created["session"] == "build");
  CHECK(f.exec("pwd; echo $MODE", {{"session", "build"}})["stdout"] == "/tmp\nrelease\n");
  f.exec("cd /home/user", {{"session", "build"}});
  CHECK(f.exec("pwd; echo \"[$MODE]\"")["stdout"] == "/workspace\n[]\n");
  auto list = f.call("session.list", json::object());
  REQUIRE(list["sessions"].size() == 2);
  CHECK(list["sessions"][0]["session"] == "build");
  CHECK(list["sessions"][0]["cwd"] == "/home/user");
  CHECK(list["sessions"][1]["session"] == "default");
  CHECK_THROWS_AS(f.call("session.create", {{"name", "build"}}), SandboxError);
  CHECK(f.call("session.delete", {{"session", "build"}})["deleted"] == true);
  CHECK(f.call("session.list", json::object())["sessions"].size() == 1);
  CHECK_THROWS_AS(f.call("session.delete", {{"session", "default"}}), SandboxError);
}

TEST_CASE("sessions run in parallel; calls within one session run in order") {
  SandboxFixture f;
  f.call("session.create", {{"name", "a"}});
  f.call("session.create", {{"name", "b"}});
  auto start = std::chrono::steady_clock::now();
  auto a = std::async(std::launch::async, [&] { return f.exec("sleep 1; echo a", {{"session", "a"}}); });
  auto b = std::async(std::launch::async, [&] { return f.exec("sleep 1; echo b", {{"session", "b"}}); });
  CHECK(a.get()["stdout"] == "a\n");
  CHECK(b.get()["stdout"] == "b\n");
  auto parallel = std::chrono::steady_clock::now() - start;
  CHECK(parallel < std::chrono::milliseconds(1900));

  // Two calls into one session: the second sees the first's effect.
  auto first = std::async(std::launch::async, [&] { return f.exec("sleep 0.5; export ORDER=first", {{"session", "a"}}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto second = f.exec("echo $ORDER", {{"session", "a"}});
  first.get();
  CHECK(second["stdout"] == "first\n");
}

namespace {

// Sends every request to the agent before any reply comes back, as a server
// with several calls in flight does, and waits for all the outcomes.
std::vector<AgentClient::Outcome> in_flight(AgentClient& agent, const std::vector<std::pair<std::string, json>>& calls) {
  std::vector<std::shared_ptr<std::promise<AgentClient::Outcome>>> promises;
  for (const auto& [method, params] : calls) {
    auto promise = std::make_shared<std::promise<AgentClient::Outcome>>();
    promises.push_back(promise);
    agent.call_async(method, params, std::chrono::seconds(60),
                     [promise](AgentClient::Outcome outcome) { promise->set_value(std::move(outcome)); });
  }
  std::vector<AgentClient::Outcome> outcomes;
  for (auto& promise : promises) outcomes.push_back(promise->get_future().get());
  return outcomes;
}

}  // namespace

TEST_CASE("calls in flight on one session run in arrival order, file operations included") {
  SandboxFixture f;
  Lease lease = f.manager->acquire("test");
  auto& agent = lease.agent();
  int out_of_order = 0;
  for (int rep = 0; rep < 15; ++rep) {
    std::string file = "order" + std::to_string(rep);
    std::vector<std::pair<std::string, json>> calls;
    // The earlier a command, the longer it sleeps: only the session's line
    // keeps them in order.
    for (int i = 1; i <= 4; ++i)
      calls.emplace_back("exec", json{{"command", "sleep 0.0" + std::to_string(2 * (4 - i)) + "; echo " +
                                                      std::to_string(i) + " >> " + file},
                                      {"timeout_ms", 30'000}});
    calls.emplace_back("file.read", json{{"path", file}});
    calls.emplace_back("file.write", json{{"path", file}, {"content", "replaced\n"}});
    calls.emplace_back("exec", json{{"command", "cat " + file}, {"timeout_ms", 30'000}});
    auto outcomes = in_flight(agent, calls);
    // A file.read that overtakes the execs fails: the file does not exist yet.
    bool failed = std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.error.has_value(); });
    if (failed || outcomes[4].result.value("content", "") != "1\n2\n3\n4\n" ||
        outcomes[6].result.value("stdout", "") != "replaced\n")
      ++out_of_order;
  }
  CHECK(out_of_order == 0);
}

TEST_CASE("a call waiting in its session's line leaves it when cancelled") {
  SandboxFixture f;
  Lease lease = f.manager->acquire("test");
  auto& agent = lease.agent();
  auto first = std::make_shared<std::promise<AgentClient::Outcome>>();
  agent.call_async("exec", {{"command", "sleep 1"}, {"timeout_ms", 30'000}}, std::chrono::seconds(60),
                   [first](AgentClient::Outcome o) { first->set_value(std::move(o)); });
  auto waiting = std::make_shared<std::promise<AgentClient::Outcome>>();
  auto id = agent.call_async("exec", {{"command", "echo late"}, {"timeout_ms", 30'000}}, std::chrono::seconds(60),
                             [waiting](AgentClient::Outcome o) { waiting->set_value(std::move(o)); });
  auto start = std::chrono::steady_clock::now();
  agent.cancel(id);
  auto outcome = waiting->get_future().get();
  CHECK(outcome.error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(800));
  CHECK_FALSE(first->get_future().get().error);
}
