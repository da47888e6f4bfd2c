// Limits: a fork bomb, a memory bomb and an output flood stay inside their
// sandbox; an agent that dies is restarted with a notice; the number of
// running sandboxes is capped with LRU teardown.
#include "fixture.h"

#include <csignal>
#include <future>
#include <sstream>
#include <sys/resource.h>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
using agentbox::persistence::SandboxState;

namespace {

ManagerOptions small_limits() {
  ManagerOptions o;
  o.limits.max_processes = 64;
  o.limits.memory_bytes = 256ull << 20;
  return o;
}

}  // namespace

TEST_CASE("a fork bomb is contained and the other sandbox carries on") {
  SandboxFixture f(small_limits());
  f.exec("true", {}, "neighbour");
  auto bomb = std::async(std::launch::async, [&] {
    return f.exec("bomb() { bomb | bomb & }; bomb; sleep 60", {{"timeout_ms", 4000}}, "bomber");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  auto start = std::chrono::steady_clock::now();
  auto neighbour = f.exec("echo fine", {}, "neighbour");
  CHECK(neighbour["stdout"] == "fine\n");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  auto r = bomb.get();
  CHECK(r["timed_out"] == true);
  auto after = f.exec("echo recovered; ps -e --no-headers | wc -l", {}, "bomber");
  CHECK(after["stdout"].get<std::string>().rfind("recovered\n", 0) == 0);
  CHECK(std::stoi(after["stdout"].get<std::string>().substr(10)) < 10);
}

TEST_CASE("file writes carry on while the sandbox's process slots are all taken") {
  SandboxFixture f(small_limits());
  f.call("file.write", {{"path", "kept.txt"}, {"content", "old"}});
  // Sleepers until fork fails: the slots stay taken (a fork bomb frees and
  // retakes them).
  // (Python: bash retries a failed fork for seconds.)
  auto filler = f.call("process.start", {{"command", "exec python3 -c '\nimport os, time\nwhile True:\n"
                                                     "    try: pid = os.fork()\n    except OSError: break\n"
                                                     "    if pid == 0: time.sleep(60); os._exit(0)\n"
                                                     "print(\"full\", flush=True); time.sleep(60)'"}});
  REQUIRE(f.call("process.output", {{"process_id", filler["process_id"]}, {"pattern", "full"}, {"wait_ms", 10000}})["matched"] == true);
  // The first overwrite in this agent would start its closing thread, which
  // cannot be created now: the old file is closed on the spot instead.
  CHECK(f.call("file.write", {{"path", "kept.txt"}, {"content", "new"}})["created"] == false);
  CHECK(f.call("file.read", {{"path", "kept.txt"}})["content"] == "new");
  f.call("process.kill", {{"process_id", filler["process_id"]}, {"signal", "SIGKILL"}});
  CHECK(f.call("file.write", {{"path", "kept.txt"}, {"content", "newer"}})["created"] == false);
  CHECK(f.exec("cat kept.txt")["stdout"] == "newer");
}

TEST_CASE("a memory bomb is stopped inside its sandbox") {
  SandboxFixture f(small_limits());
  if (!f.manager->cgroups().has_memory)
    WARN("no memory cgroup here: the bomb is stopped by RLIMIT_DATA instead (" << f.manager->cgroups().detail << ")");
  auto r = f.exec("python3 -c \"b=[]\nwhile True: b.append(bytearray(64<<20))\"; echo exit=$?", {{"timeout_ms", 60000}});
  std::string out = r["stdout"];
  CHECK(r["timed_out"] == false);
  // Killed by the OOM killer (137) or refused with MemoryError (1), never finished.
  bool stopped = out == "exit=137\n" || out == "exit=1\n";
  CHECK(stopped);
  CHECK(f.exec("echo still-here")["stdout"] == "still-here\n");
  CHECK(f.exec("echo neighbour", {}, "other")["stdout"] == "neighbour\n");
}

TEST_CASE("a 1 GB stdout flood is capped and costs the server nothing") {
  SandboxFixture f;
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  auto start = std::chrono::steady_clock::now();
  auto r = f.exec("head -c 1000000000 /dev/zero | tr '\\0' y", {{"timeout_ms", 120000}});
  auto elapsed = std::chrono::steady_clock::now() - start;
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  CHECK(r["exit_code"] == 0);
  CHECK(r["truncated"] == true);
  CHECK(r["stdout_bytes"] == 1000000000);
  CHECK(r["stdout"].get<std::string>().size() < 31'000);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB: the test process did not buffer the flood
  WARN("1 GB flood took " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms");
  CHECK(f.exec("echo ok")["stdout"] == "ok\n");
}

TEST_CASE("an agent that dies fails its calls, and the next call restarts the sandbox with a notice") {
  SandboxFixture f;
  f.exec("echo kept > /workspace/file.txt; export LOST=1");
  auto sandbox = f.manager->find("test");
  REQUIRE(sandbox);
  auto client = sandbox->client();
  {
    Lease lease = f.manager->acquire("test");
    std::promise<AgentClient::Outcome> done;
    lease.agent().call_async("exec", {{"command", "sleep 30"}, {"timeout_ms", 60000}}, std::chrono::minutes(1),
                             [&done](AgentClient::Outcome o) { done.set_value(std::move(o)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(client->pid(), SIGKILL);
    auto outcome = done.get_future().get();
    REQUIRE(outcome.error);
    CHECK(outcome.error->code() == codes::kSandboxFailed);
  }
  CHECK(sandbox->state() == SandboxState::Failed);
  Lease lease = f.manager->acquire("test");
  CHECK(lease.notice().find("restarted") != std::string::npos);
  auto r = lease.agent().call("exec", {{"command", "cat /workspace/file.txt; echo \"[$LOST]\""}}, std::chrono::seconds(20));
  CHECK(r["stdout"] == "kept\n[]\n");
}

TEST_CASE("at most max_sandboxes run; the least recently used one is stopped") {
  ManagerOptions o;
  o.max_sandboxes = 2;
  SandboxFixture f(o);
  f.exec("true", {}, "one");
  f.exec("true", {}, "two");
  f.exec("true", {}, "one");  // "two" is now the least recently used
  f.exec("true", {}, "three");
  CHECK(f.manager->running() == 2);
  CHECK(f.manager->find("two")->state() == SandboxState::Stopped);
  CHECK(f.manager->find("one")->state() == SandboxState::Active);
}

TEST_CASE("a file larger than the file size limit cannot be written, and the session carries on") {
  ManagerOptions o;
  o.limits.file_size_bytes = 1 << 20;
  SandboxFixture f(o);
  auto r = f.exec("head -c 2000000 /dev/zero > /workspace/big; echo rc=$?; stat -c %s /workspace/big");
  // SIGXFSZ kills the writer (128 + 25) and the file stops at the limit.
  CHECK(r["stdout"] == "rc=153\n1048576\n");
  CHECK(f.exec("echo ok")["stdout"] == "ok\n");
}

TEST_CASE("a busy loop in a sandbox capped at half a CPU uses at most about half a CPU") {
  ManagerOptions o;
  o.limits.cpus = 0.5;
  SandboxFixture f(o);
  const auto& cg = f.manager->cgroups();
  if (!cg.writable || !cg.has_cpu) {
    WARN("SKIPPED: the CPU quota is not tested here: the cgroup cpu controller is not writable by this user ("
         << cg.detail << "); run the sandbox tests as root (or with a delegated cgroup v2 subtree) to test it");
    return;
  }
  f.exec("true");
  auto sandbox = f.manager->find("test");
  REQUIRE(sandbox);
  REQUIRE(sandbox->cpu_quota() == 0.5);
  // `times` prints the CPU time (user, system) of the shell's finished children.
  auto r = f.exec("timeout 2 sh -c 'while :; do :; done'; times", {{"timeout_ms", 30000}});
  std::string out = r["stdout"];
  auto line = out.find('\n');
  REQUIRE(line != std::string::npos);
  double total = 0;
  std::istringstream children(out.substr(line + 1));
  for (std::string field; children >> field;) {
    auto m = field.find('m');
    REQUIRE(m != std::string::npos);
    total += std::stod(field.substr(0, m)) * 60 + std::stod(field.substr(m + 1));
  }
  WARN("busy loop for 2 s under a 0.5 CPU quota used " << total << " s of CPU");
  CHECK(total > 0.1);   // it did run
  CHECK(total <= 1.2);  // 60% of one CPU over 2 s
}
