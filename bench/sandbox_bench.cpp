// Sandbox benchmarks, reported as ratios against baselines measured in the
// same run (process creation is slow on some hosts; absolute times mislead):
//   1. exec of /bin/true in a warm session (server -> agent -> shell) vs
//      spawning /bin/true directly;
//   2. first call of a new conversation (sandbox cold start + exec) vs a bare
//      `bwrap <same plan> /bin/true`;
//   3. RSS of this process (the server side) and of one idle sandbox.
// Usage: sandbox_bench AGENT_BINARY [iterations]
#include "sandbox/bwrap_plan.h"
#include "sandbox/manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <grp.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace agentbox::sandbox;
using Clock = std::chrono::steady_clock;
extern char** environ;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_and_wait(std::vector<std::string> argv, bool drop) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (drop && (setgroups(0, nullptr) || setgid(65534) || setuid(65534))) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::fprintf(stderr, "baseline command failed (%d)\n", status);
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// pid and all its descendants, from /proc.
std::vector<pid_t> tree(pid_t root) {
  std::vector<pid_t> out = {root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::ifstream children("/proc/" + std::to_string(out[i]) + "/task/" + std::to_string(out[i]) + "/children");
    pid_t c;
    while (children >> c) out.push_back(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sandbox_bench AGENT_BINARY [iterations]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  int n = argc > 2 ? std::atoi(argv[2]) : 200;
  char tmpl[] = "/tmp/agentbox-bench-XXXXXX";
  ManagerOptions options;
  options.state_dir = mkdtemp(tmpl);
  options.agent_binary = argv[1];
  options.agent_args = {};
  options.max_sandboxes = 1000;
  Manager manager(options);
  bool root = geteuid() == 0;

  // 1. warm exec vs direct spawn, interleaved so drift hits both alike.
  Lease warm = manager.acquire("warm");
  warm.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
  std::vector<double> direct, exec;
  for (int i = 0; i < n; ++i) {
    auto t = Clock::now();
    run_and_wait({"/bin/true"}, false);
    direct.push_back(ms_since(t));
    t = Clock::now();
    warm.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
    exec.push_back(ms_since(t));
  }
  std::printf("exec /bin/true, warm session: median %.2f ms; direct spawn: median %.2f ms; ratio %.2f (target <= 1.5)\n",
              median(exec), median(direct), median(exec) / median(direct));

  // 2. cold start vs bare bwrap with the same plan.
  BwrapOptions plan;
  plan.dirs.root = options.state_dir / "sandboxes" / "bare";
  for (auto d : {plan.dirs.root, plan.dirs.workspace(), plan.dirs.home(), plan.dirs.tmp(), plan.dirs.etc()})
    std::filesystem::create_directories(d);
  for (const auto& [name, content] : generated_etc_files(plan)) std::ofstream(plan.dirs.etc() / name) << content;
  if (root) {
    chmod(options.state_dir.c_str(), 0711);
    for (auto d : {plan.dirs.root, plan.dirs.workspace(), plan.dirs.home(), plan.dirs.tmp()})
      if (chown(d.c_str(), 65534, 65534) != 0) perror("chown");
  }
  plan.agent_binary = "/bin/true";
  auto bare_argv = bwrap_argv(plan);
  bare_argv.back() = "/bin/true";  // run true itself instead of the agent
  bare_argv[bare_argv.size() - 1] = kAgentPathInside;
  std::vector<double> bare, cold, cold_start, cold_exec;
  int cold_n = std::max(10, n / 10);
  for (int i = 0; i < cold_n; ++i) {
    auto t = Clock::now();
    run_and_wait(bare_argv, root);
    bare.push_back(ms_since(t));
    t = Clock::now();
    std::string conversation = "cold-" + std::to_string(i);
    {
      Lease lease = manager.acquire(conversation);
      cold_start.push_back(ms_since(t));
      auto e = Clock::now();
      lease.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
      cold_exec.push_back(ms_since(e));
    }
    cold.push_back(ms_since(t));
    manager.destroy(conversation);
  }
  std::printf("first call of a new conversation: median %.2f ms (start %.2f + first exec %.2f); bare bwrap true: "
              "median %.2f ms; ratio %.2f (target <= 1.5)\n",
              median(cold), median(cold_start), median(cold_exec), median(bare), median(cold) / median(bare));

  // 3. RSS.
  Lease idle = manager.acquire("idle");
  pid_t bwrap_pid = idle.agent().pid();
  usleep(200'000);
  long idle_kib = 0;
  for (pid_t p : tree(bwrap_pid)) idle_kib += rss_kib(p);
  long with_shell = 0;
  idle.agent().call("exec", {{"command", "true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
  for (pid_t p : tree(bwrap_pid)) with_shell += rss_kib(p);
  std::printf("RSS: this (server-side) process %.1f MB; idle sandbox (bwrap x2 + agent) %.1f MB; with a session shell %.1f MB\n",
              rss_kib(getpid()) / 1024.0, idle_kib / 1024.0, with_shell / 1024.0);
  std::printf("agent alone: %.1f MB\n", [&] {
    auto t = tree(bwrap_pid);
    return t.size() > 2 ? rss_kib(t[2]) / 1024.0 : 0.0;
  }());
  std::filesystem::remove_all(options.state_dir);
  return 0;
}
