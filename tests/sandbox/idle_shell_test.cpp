// The agent as the sandbox's pid 1 (bwrap --as-pid-1) and idle session shells
// (docs/sandbox.md, "Idle shells"): a shell idle longer than --shell-idle-ms
// with no process of its own exits, and the next exec restores its state.
#include "fixture.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::sandbox;

namespace {

// SandboxFixture with agent arguments of our own (it clears agent_args).
struct IdleFixture {
  explicit IdleFixture(const std::string& idle_ms) {
    char tmpl[] = "/tmp/agentbox-idle-test-XXXXXX";
    state_dir = mkdtemp(tmpl);
    ManagerOptions options;
    options.state_dir = state_dir;
    const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
    options.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
    options.agent_args = {"--shell-idle-ms", idle_ms};
    manager = std::make_unique<Manager>(options);
  }
  ~IdleFixture() {
    manager.reset();
    std::error_code ec;
    fs::remove_all(state_dir, ec);
  }
  json call(const std::string& method, json params) {
    Lease lease = manager->acquire("idle");
    return lease.agent().call(method, std::move(params), std::chrono::minutes(1));
  }
  json exec(const std::string& command, const std::string& session = "default") {
    return call("exec", {{"command", command}, {"session", session}, {"timeout_ms", 30'000}});
  }
  fs::path state_dir;
  std::unique_ptr<Manager> manager;
};

void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("an idle session shell exits and the next exec restores the session") {
  IdleFixture f("300");
  f.call("session.create", {{"name", "probe"}});
  auto first = f.exec("cd /tmp; export IDLE_A='x y'; IDLE_B=2; idle_f() { echo fn; }; alias idle_hi='echo alias'; "
                      "umask 027; trap 'echo bye' USR1; set -o pipefail; echo $$");
  REQUIRE(first["exit_code"] == 0);
  std::string pid = first["stdout"].get<std::string>();
  pid.pop_back();
  pause_ms(1500);
  // From another session: the default session's bash is gone.
  CHECK(f.exec("kill -0 " + pid + " 2>/dev/null && echo alive || echo gone", "probe")["stdout"] == "gone\n");
  auto again = f.exec("echo $$; pwd; echo \"$IDLE_A/$IDLE_B\"; idle_f; idle_hi; umask; trap -p USR1; "
                      "[[ -o pipefail ]] && echo pipefail");
  CHECK(again["exit_code"] == 0);
  std::string out = again["stdout"];
  CHECK(out.substr(out.find('\n') + 1) == "/tmp\nx y/2\nfn\nalias\n0027\ntrap -- 'echo bye' SIGUSR1\npipefail\n");
  CHECK(out.substr(0, out.find('\n')) != pid);
  CHECK_FALSE(again.contains("notice"));
}

TEST_CASE("a shell with a job still running is not idle") {
  IdleFixture f("300");
  std::string pid = f.exec("sleep 30 & echo $$")["stdout"];
  pause_ms(1200);
  CHECK(f.exec("echo $$")["stdout"] == pid);
  f.exec("kill %1");
}

TEST_CASE("shells live on with --shell-idle-ms 0") {
  IdleFixture f("0");
  std::string pid = f.exec("echo $$")["stdout"];
  pause_ms(800);
  CHECK(f.exec("echo $$")["stdout"] == pid);
}

TEST_CASE("the agent is the sandbox's pid 1 and sandboxed code cannot signal it away") {
  IdleFixture f("0");
  CHECK(f.exec("cat /proc/1/cmdline | tr '\\0' ' '")["stdout"].get<std::string>().find("agent") != std::string::npos);
  auto r = f.exec("for s in KILL TERM INT HUP QUIT USR1 STOP; do kill -s $s 1; done; echo sent");
  CHECK(r["stdout"] == "sent\n");
  pause_ms(200);
  CHECK(f.exec("echo still here")["stdout"] == "still here\n");
  // A process whose parent is gone is collected (no zombie left on pid 1).
  f.exec("( ( sleep 0.2 & ) & ); sleep 0.6");
  CHECK(f.exec("ps -eo stat= | grep -c '^Z' || true")["stdout"] == "0\n");
}
