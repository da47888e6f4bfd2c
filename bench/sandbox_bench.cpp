// Sandbox benchmarks, reported as ratios against baselines measured in the
// same run (process creation is slow on some hosts; absolute times mislead):
//   1. exec of /bin/true in a warm session (server -> agent -> shell) vs
//      spawning /bin/true directly;
//   2. first call of a new conversation (sandbox cold start + exec) vs a bare
//      `bwrap <same plan> /bin/true`, with nothing prepared ahead (spare
//      none), with the default (spare prepared) and with a warm spare;
//   3. memory, RSS (the measure) and PSS, of this process (the server
//      side) and of every process of one idle sandbox: with its session
//      shell alive, and after the shell idled out (--shell-idle-ms).
// Usage: sandbox_bench AGENT_BINARY [iterations] [gap_ms between cold starts, default 150]
#include "bench/figures.h"
#include "bench/bare_plan.h"
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

using agentbox::bench::median;
using agentbox::bench::ms_since;

namespace {



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

struct Memory {
  long rss_kib = 0, pss_kib = 0;
};

// Rss and Pss of /proc/PID/smaps_rollup.
Memory memory_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string key;
  Memory m;
  while (in >> key) {
    if (key == "Rss:") in >> m.rss_kib;
    else if (key == "Pss:") in >> m.pss_kib;
    in.ignore(1 << 20, '\n');
  }
  return m;
}

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
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
  int gap_ms = argc > 3 ? std::atoi(argv[3]) : 150;
  char tmpl[] = "/tmp/agentbox-bench-XXXXXX";
  ManagerOptions options;
  options.state_dir = mkdtemp(tmpl);
  options.agent_binary = argv[1];
  options.agent_args = {};
  options.max_sandboxes = 1000;
  bool root = geteuid() == 0;
  {
    // Destroyed before its state directory is removed: as root its sandboxes
    // have filesystems of their own, mounted until the manager shuts down.
    Manager manager(options);

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

    // 2. cold start vs bare bwrap with the same plan, for each spare setting
    // (ManagerOptions::spare), each in a manager of its own; the bare bwrap
    // runs are interleaved with the cold starts so drift hits both alike.
    // The bare plan binds by path, run as the sandbox uid: not under the
    // server's own 0700 sandboxes/ (sandboxes get their dirs as fds).
    if (root) chmod(options.state_dir.c_str(), 0711);
    auto bare_argv = agentbox::bench::bare_plan_argv(options.state_dir / "bare");
    int cold_n = std::max(10, n / 10);
    struct Mode {
      ManagerOptions::Spare spare;
      const char* label;
    };
    for (Mode mode : {Mode{ManagerOptions::Spare::None, "spare none: everything on the call's path"},
                      Mode{ManagerOptions::Spare::Prepared, "spare prepared (default): dirs, cgroup, launcher ahead"},
                      Mode{ManagerOptions::Spare::Warm, "spare warm (extra): a running spare sandbox claimed"}}) {
      char cold_tmpl[] = "/tmp/agentbox-bench-cold-XXXXXX";
      ManagerOptions cold_options = options;
      cold_options.state_dir = mkdtemp(cold_tmpl);
      cold_options.spare = mode.spare;
      if (root) chmod(cold_options.state_dir.c_str(), 0711);
      std::vector<double> bare, cold, cold_start, cold_exec;
      int ready = 0;
      {
        Manager cold_manager(cold_options);
        usleep(300'000);  // the first spare, as a server that has been up a moment has it
        for (int i = 0; i < cold_n; ++i) {
          // New conversations do not arrive back to back: the manager replaces
          // its spare 50 ms after the last start (ManagerOptions::spare). The
          // gap also matters without a spare: a cgroup v1 join right after
          // another one is cheap, after a pause it waits for an RCU grace
          // period (docs/sandbox.md "Cold start").
          usleep(gap_ms * 1000);
          auto t = Clock::now();
          run_and_wait(bare_argv, root);
          bare.push_back(ms_since(t));
          ready += cold_manager.spare_state() != "none";
          t = Clock::now();
          std::string conversation = "cold-" + std::to_string(i);
          {
            Lease lease = cold_manager.acquire(conversation);
            cold_start.push_back(ms_since(t));
            auto e = Clock::now();
            lease.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
            cold_exec.push_back(ms_since(e));
          }
          cold.push_back(ms_since(t));
          cold_manager.destroy(conversation);
        }
      }
      std::filesystem::remove_all(cold_options.state_dir);
      std::printf("first call of a new conversation [%s]: median %.2f ms (start %.2f + first exec %.2f; spare ready "
                  "%d/%d); bare bwrap true: median %.2f ms; ratio %.2f (target <= 1.5)\n",
                  mode.label, median(cold), median(cold_start), median(cold_exec), ready, cold_n, median(bare),
                  median(cold) / median(bare));
    }

    // 3. Memory. Every process under the sandbox's bwrap, summed: RSS counts
    // pages shared with other processes (the agent's code, libc) in each of
    // them, PSS divides them among the processes that map them.
    auto sandbox_memory = [](pid_t bwrap_pid) {
      Memory total;
      std::string parts;
      for (pid_t p : tree(bwrap_pid)) {
        Memory m = memory_of(p);
        total.rss_kib += m.rss_kib;
        total.pss_kib += m.pss_kib;
        char part[96];
        std::snprintf(part, sizeof part, "%s%s %.1f/%.1f", parts.empty() ? "" : ", ", comm_of(p).c_str(),
                      m.rss_kib / 1024.0, m.pss_kib / 1024.0);
        parts += part;
      }
      char head[96];
      std::snprintf(head, sizeof head, "RSS %.1f MiB, PSS %.1f MiB", total.rss_kib / 1024.0, total.pss_kib / 1024.0);
      return std::make_pair(total, std::string(head) + " (RSS/PSS MiB: " + parts + ")");
    };
    {
      Lease idle = manager.acquire("idle");
      idle.agent().call("exec", {{"command", "true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
      usleep(300'000);
      auto [with_shell, text] = sandbox_memory(idle.agent().pid());
      Memory self = memory_of(getpid());
      std::printf("memory: server side (this process): RSS %.1f MiB, PSS %.1f MiB\n", self.rss_kib / 1024.0,
                  self.pss_kib / 1024.0);
      std::printf("memory: idle sandbox, session shell alive: %s; target RSS < 5\n", text.c_str());
    }
    {
      // The same with shells that idle out after 300 ms (the server's
      // --shell-idle-timeout, 60 s by default).
      ManagerOptions idle_options = options;
      char idle_tmpl[] = "/tmp/agentbox-bench-idle-XXXXXX";
      idle_options.state_dir = mkdtemp(idle_tmpl);
      if (root) chmod(idle_options.state_dir.c_str(), 0711);
      idle_options.agent_args = {"--shell-idle-ms", "300"};
      {
        Manager idle_manager(idle_options);
        Lease idle = idle_manager.acquire("idle");
        idle.agent().call("exec", {{"command", "true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
        usleep(1'000'000);
        auto [idled, text] = sandbox_memory(idle.agent().pid());
        std::printf("memory: idle sandbox, shell idled out: %s; target RSS < 5\n", text.c_str());
        // What the next command pays for a fresh shell, against a warm one.
        std::vector<double> restart, warm;
        for (int i = 0; i < 10; ++i) {
          usleep(700'000);  // idles out again
          auto t = Clock::now();
          idle.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
          restart.push_back(ms_since(t));
          t = Clock::now();
          idle.agent().call("exec", {{"command", "/bin/true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
          warm.push_back(ms_since(t));
        }
        std::printf("exec after the shell idled out: median %.2f ms; warm session: median %.2f ms\n", median(restart),
                    median(warm));
      }
      std::filesystem::remove_all(idle_options.state_dir);
    }
  }
  std::filesystem::remove_all(options.state_dir);
  return 0;
}
