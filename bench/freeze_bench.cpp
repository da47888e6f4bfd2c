// How long a snapshot of a running sandbox keeps its processes frozen
// (docs/design.md section 9, "Consistent snapshots"): a workspace of N small
// files (default 100,000) with a process writing to it, snapshotted through
// the manager (sandbox_snapshot's path: freeze, archive, thaw), against GNU
// `tar --zstd -cf` of the same live tree in the same run. frozen_ms is the
// figure; the ratio is frozen time / tar time (<= 1: the freeze costs no more
// than reading the tree once).
//
//   bench/freeze_bench AGENT_BINARY [FILES] [ROUNDS]   (from the build dir)
//   tests/sandbox/run_unprivileged.sh bench/freeze_bench $(pwd)/agentbox-agent - [FILES] [ROUNDS]
//     as the normal user (no cgroup: the agent's SIGSTOP); "-" takes the agent
//     run_unprivileged.sh passes in AGENTBOX_TEST_AGENT.
#include "bench/figures.h"
#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace agentbox::sandbox;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using agentbox::bench::median;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: freeze_bench AGENT_BINARY [FILES] [ROUNDS]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  int files = argc > 2 ? std::atoi(argv[2]) : 100000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  char tmpl[] = "/tmp/agentbox-freeze-bench-XXXXXX";
  ManagerOptions options;
  options.state_dir = mkdtemp(tmpl);
  if (geteuid() == 0) chmod(options.state_dir.c_str(), 0711);
  const char* copied = std::getenv("AGENTBOX_TEST_AGENT");
  options.agent_binary = std::string(argv[1]) == "-" && copied ? copied : argv[1];
  options.agent_args = {};
  options.checkpoint_interval = std::chrono::milliseconds(0);
  options.idle_timeout = std::chrono::milliseconds(0);
  options.keep_snapshots = 2;
  std::vector<double> frozen, total, tar;
  std::string method;
  {
    // Destroyed before its state directory is removed (as root its sandboxes' filesystems are mounted).
    Manager manager(options);
    {
      Lease lease = manager.acquire("bench");
      std::string make = "python3 -c \"import os\nfor d in range(" + std::to_string((files + 999) / 1000) +
                         "):\n os.makedirs(f'/workspace/t/d{d}', exist_ok=True)\nfor i in range(" +
                         std::to_string(files) + "):\n open(f'/workspace/t/d{i // 1000}/f{i}', 'w').write('x' * 100)\"";
      auto made = lease.agent().call("exec", {{"command", make}, {"timeout_ms", 600000}}, std::chrono::minutes(11));
      if (made.value("exit_code", 1) != 0) {
        std::fprintf(stderr, "could not make the workspace: %s\n", made.dump().c_str());
        return 1;
      }
      lease.agent().call("process.start", {{"command", "while :; do date +%s%N > /workspace/now; done"}},
                         std::chrono::seconds(10));
    }
    fs::path workspace = manager.find("bench")->dirs().workspace();
    for (int r = 0; r < rounds; ++r) {
      auto info = manager.snapshot("bench", "", {});
      if (!info.frozen) {
        std::fprintf(stderr, "not frozen: %s\n", info.freeze.c_str());
        return 1;
      }
      method = info.freeze;
      frozen.push_back(static_cast<double>(info.frozen->count()));
      total.push_back(static_cast<double>(info.duration.count()));
      fs::path out = options.state_dir / "tar.tar.zst";
      std::string command = "tar --zstd -cf " + out.string() + " -C " + workspace.string() + " .";
      sync();
      auto start = Clock::now();
      if (std::system(command.c_str()) != 0) std::fprintf(stderr, "tar reported an error (a file changed while read)\n");
      tar.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      fs::remove(out);
    }
    manager.destroy("bench");
  }
  std::error_code ec;
  fs::remove_all(options.state_dir, ec);
  std::printf("snapshot of a running sandbox, %d files: frozen median %.0f ms (%s; whole snapshot %.0f ms); "
              "tar --zstd -cf of the tree: median %.0f ms; ratio %.2f (target <= 1)\n",
              files, median(frozen), method.c_str(), median(total), median(tar), median(frozen) / median(tar));
  return 0;
}
