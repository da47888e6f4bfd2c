// The manager's starts: different conversations start in parallel (a slow
// start does not hold up another conversation), and concurrent first calls
// of one conversation share a single start.
#include "fixture.h"

#include <csignal>
#include <fstream>
#include <future>
#include <sys/stat.h>
#include <thread>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
using agentbox::persistence::SandboxState;
using Clock = std::chrono::steady_clock;

namespace {

// A bwrap that takes 1.5 s to start sandboxes whose workspace holds a file
// named slow-start, and is plain bwrap otherwise.
std::string slow_bwrap(const std::filesystem::path& dir) {
  std::filesystem::path script = dir / "slow-bwrap";
  std::ofstream(script) << "#!/bin/sh\n"
                           "for a in \"$@\"; do case \"$a\" in */workspace) [ -e \"$a/slow-start\" ] && sleep 1.5;; esac; done\n"
                           "exec /usr/bin/bwrap \"$@\"\n";
  chmod(dir.c_str(), 0755);
  chmod(script.c_str(), 0755);
  return script.string();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("a slow sandbox start does not hold up other conversations; one start serves concurrent calls") {
  char tmpl[] = "/tmp/agentbox-slow-bwrap-XXXXXX";
  std::filesystem::path scripts = mkdtemp(tmpl);
  ManagerOptions o;
  o.bwrap = slow_bwrap(scripts);
  SandboxFixture f(o);
  f.exec("touch /workspace/slow-start", {}, "slow");
  auto client = f.manager->find("slow")->client();
  ::kill(client->pid(), SIGKILL);  // the next call restarts it, slowly
  for (int i = 0; i < 100 && f.manager->find("slow")->state() == SandboxState::Active; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));

  auto started = Clock::now();
  auto first = std::async(std::launch::async, [&] { return f.exec("echo one", {}, "slow"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(f.manager->find("slow")->state() == SandboxState::Starting);
  auto second = std::async(std::launch::async, [&] { return f.exec("echo two", {}, "slow"); });
  auto fast_started = Clock::now();
  CHECK(f.exec("echo fast", {}, "fast")["stdout"] == "fast\n");
  CHECK(seconds_since(fast_started) < 1.2);
  CHECK(first.get()["stdout"] == "one\n");
  CHECK(second.get()["stdout"] == "two\n");
  CHECK(seconds_since(started) < 2.9);  // one slow start, not two
  CHECK(f.manager->find("slow")->state() == SandboxState::Active);
  std::filesystem::remove_all(scripts);
}
