// Fork → first command in the fork (docs/design.md section 9, "Fork"): a
// workspace of N files (default 100,000 of 10 KB: 1 GB) forked now through
// the manager (as root: a copy-on-write clone of the box's disk in the disk
// pool, sandbox/disk_pool.h), against `cp -a` of the same workspace on the
// host and against a complete snapshot of it (--snapshot-chain 1), in the
// same run. Target: fork → first command ≤ 100 ms whatever the size.
//
//   bench/fork_bench AGENT_BINARY [FILES] [FILE_BYTES] [ROUNDS]   (from the build dir, as root)
#include "bench/figures.h"
#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

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
using agentbox::bench::ms_since;
using agentbox::bench::run;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fork_bench AGENT_BINARY [FILES] [FILE_BYTES] [ROUNDS]\n");
    return 2;
  }
  spdlog::set_level(std::getenv("BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  int files = argc > 2 ? std::atoi(argv[2]) : 100000;
  int file_bytes = argc > 3 ? std::atoi(argv[3]) : 10000;
  int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  char tmpl[] = "/var/tmp/agentbox-fork-bench-XXXXXX";
  fs::path state = mkdtemp(tmpl);
  if (geteuid() == 0) chmod(state.c_str(), 0711);
  ManagerOptions o;
  o.state_dir = state;
  o.agent_binary = argv[1];
  o.agent_args = {};
  o.spare = ManagerOptions::Spare::None;
  o.idle_timeout = std::chrono::milliseconds(0);
  o.checkpoint_interval = std::chrono::milliseconds(0);
  o.snapshot_chain = 1;  // every snapshot complete: the baseline a fork must beat
  o.keep_snapshots = 1;
  o.snapshot_timeout = std::chrono::minutes(30);
  std::vector<double> fork_first, fork_call, frozen, copy, snapshot;
  {
    Manager manager(o);
    if (std::string why = manager.disks().clone_why(); !why.empty())
      std::printf("NOTE: forks do not clone here (%s): this measures the snapshot path\n", why.c_str());
    {
      Lease lease = manager.acquire("bench");
  if (!agentbox::bench::make_workspace(lease.agent(), files, file_bytes)) return 1;
    }
    fs::path workspace = manager.find("bench")->dirs().workspace();
    for (int r = 0; r < rounds; ++r) {
      fs::path into = state.string() + "-cp" + std::to_string(r);
      sync();
      auto start = Clock::now();
      run("cp -a " + workspace.string() + " " + into.string());
      copy.push_back(ms_since(start));
      sync();
      start = Clock::now();
      auto taken = manager.snapshot("bench", "");
      snapshot.push_back(ms_since(start));
      sync();
      start = Clock::now();
      auto made = manager.fork("bench", "", "fork" + std::to_string(r), 1);
      fork_call.push_back(ms_since(start));
      {
        Lease lease = manager.acquire(made.forks[0].conversation);
        auto ls = lease.agent().call("exec", {{"command", "ls /workspace/t/d0 | wc -l"}}, std::chrono::minutes(5));
        fork_first.push_back(ms_since(start));
        if (ls.value("stdout", "") != std::to_string(std::min(files, 1000)) + "\n") {
          std::fprintf(stderr, "the fork does not hold the workspace: %s\n", ls.dump().c_str());
          return 1;
        }
      }
      frozen.push_back(made.taken.frozen ? static_cast<double>(made.taken.frozen->count()) : -1);
      if (!made.cloned) std::printf("NOTE: round %d forked through a snapshot\n", r);
      manager.destroy(made.forks[0].conversation);
      std::error_code ec;
      fs::remove_all(into, ec);
    }
    manager.destroy("bench");
  }
  std::error_code ec;
  fs::remove_all(state, ec);
  std::printf("fork of %d files: fork call median %.0f ms (source frozen median %.0f ms); fork -> first command in "
              "the fork median %.0f ms (target <= 100); cp -a of the workspace median %.0f ms; a complete snapshot "
              "median %.0f ms; fork/cp %.4f, fork/snapshot %.4f\n",
              files, median(fork_call), median(frozen), median(fork_first), median(copy), median(snapshot),
              median(fork_first) / median(copy), median(fork_first) / median(snapshot));
  return 0;
}
