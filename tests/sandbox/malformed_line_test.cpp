// A malformed line from a sandbox's agent ends that sandbox only: its pending
// calls fail with SANDBOX_FAILED, it is restarted on the next call, another
// conversation's sandbox goes on, and this process (the server) lives. The
// bad lines travel the real pipe: the sandboxes run corrupting_agent, the
// real agent behind a relay that swaps a line for a bad one when a command
// in the box prints AGENTBOX-CORRUPT-<n>.
#include "fixture.h"

#include <future>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
using agentbox::persistence::SandboxState;

namespace {

std::string corrupting_agent() {
  // run_unprivileged.sh may run a copy from a directory the test user can reach.
  const char* copy = std::getenv("AGENTBOX_TEST_CORRUPTING_AGENT");
  return copy && *copy ? copy : AGENTBOX_TEST_CORRUPTING_AGENT;
}

// The command that makes the relay send bad line n; its own output, when the
// bad line replaced an output notification, comes too late to matter.
json corrupt(SandboxFixture& f, int n, bool stream) {
  json params = {{"command", "echo AGENTBOX-CORRUPT-" + std::to_string(n)}, {"timeout_ms", 20000}};
  if (stream) params["stream"] = true;
  // The sink reads an output notification the way the exec tool does.
  Lease lease = f.manager->acquire("test");
  return lease.agent().call("exec", params, std::chrono::seconds(30), [](const std::string&, const json& p) {
    (void)p.value("data", "");
    (void)p.value("bytes", 0.0);
  });
}

}  // namespace

TEST_CASE("a malformed line from an agent fails that sandbox only and it restarts") {
  ManagerOptions o;
  o.agent_binary = corrupting_agent();
  SandboxFixture f(o);
  REQUIRE(f.exec("echo other", {}, "other")["stdout"] == "other\n");
  auto other = f.manager->find("other")->client();

  const char* names[] = {"not JSON", "a notification whose request is a string", "a reply to an id never sent",
                         "an error whose data.code is a number", "a result nested 100,000 deep",
                         "a result that is an array", "a reply whose id is a string", "a request from the agent",
                         "an output notification with a number for data", "a 70 MiB line"};
  for (int n = 0; n < 10; ++n) DYNAMIC_SECTION("bad line " << n << ": " << names[n]) {
    REQUIRE(f.exec("echo warm")["stdout"] == "warm\n");
    try {
      f.call("session.create", {{"name", "slow"}});
    } catch (const SandboxError&) {
      // SESSION_EXISTS: brought back after the restart.
    }
    auto client = f.manager->find("test")->client();
    REQUIRE(client->alive());
    // A call already waiting (in a session of its own) when the bad line comes fails too.
    auto waiting = std::make_shared<std::promise<AgentClient::Outcome>>();
    client->call_async("exec", {{"command", "sleep 20"}, {"session", "slow"}, {"timeout_ms", 30000}},
                       std::chrono::seconds(60), [waiting](AgentClient::Outcome o) { waiting->set_value(std::move(o)); });
    std::string code, message;
    try {
      corrupt(f, n, n == 1 || n == 8);
    } catch (const SandboxError& e) {
      code = e.code();
      message = e.what();
    }
    CHECK(code == "SANDBOX_FAILED");
    CHECK(message.find("malformed") != std::string::npos);
    CHECK_FALSE(client->alive());
    auto pending = waiting->get_future();
    REQUIRE(pending.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    auto outcome = pending.get();
    REQUIRE(outcome.error);
    CHECK(outcome.error->code() == "SANDBOX_FAILED");
    CHECK(f.manager->find("test")->state() == SandboxState::Failed);
    // Restarted on the next call.
    CHECK(f.exec("echo again")["stdout"] == "again\n");
    CHECK(f.manager->find("test")->client() != client);
  }
  // The other conversation's sandbox was never touched.
  CHECK(f.manager->find("other")->client() == other);
  CHECK(other->alive());
  CHECK(f.exec("echo still", {}, "other")["stdout"] == "still\n");
}
