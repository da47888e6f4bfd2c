// Restore → first command after an idle teardown (docs/design.md section 9,
// "Warm restore"): a workspace of N files (default 100,000 of 10 KB: 1 GB),
// torn down and called again through the manager, with its warm copy (the
// default) and from its archive alone (--warm-cache 0), against GNU
// `tar --zstd -xf` of the same tree into a fresh directory on the same
// filesystem (before any teardown deleted a tree there), in the same run. Targets: warm ≤ 100 ms; archive / tar ≤ 1. Each
// restore waits until the trees its teardown discarded are deleted (they go
// in the background; a real call comes an idle timeout later).
//
//   bench/restore_bench AGENT_BINARY [FILES] [FILE_BYTES] [ROUNDS]   (from the build dir)
//   tests/sandbox/run_unprivileged.sh bench/restore_bench $(pwd)/agentbox-agent - [FILES] [FILE_BYTES] [ROUNDS]
//     as the normal user (plain directories); "-" takes the agent run_unprivileged.sh copied.
#include "bench/figures.h"
#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace agentbox::sandbox;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using agentbox::bench::run;
using agentbox::bench::median;
using agentbox::bench::ms_since;
// A call comes an idle timeout (10 min) after its teardown, not at once.
using agentbox::bench::wait_for_trash;

namespace {

// Teardown, then the first command: how long that command takes to answer.
double first_command_ms(Manager& manager, bool expect_warm) {
  if (!manager.teardown("bench")) {
    std::fprintf(stderr, "the teardown did not happen\n");
    std::exit(1);
  }
  wait_for_trash(manager.options().state_dir / "sandboxes");
  sync();  // the teardown's writes are not the restore's to pay for
  auto start = Clock::now();
  Lease lease = manager.acquire("bench");
  auto r = lease.agent().call("exec", {{"command", "true"}}, std::chrono::minutes(5));
  double ms = ms_since(start);
  bool warm = lease.notice().find("from its warm copy") != std::string::npos;
  if (r.value("exit_code", 1) != 0 || warm != expect_warm) {
    std::fprintf(stderr, "unexpected restore (%s): %s\n", expect_warm ? "warm" : "archive", lease.notice().c_str());
    std::exit(1);
  }
  return ms;
}

ManagerOptions options_for(const fs::path& state, const char* agent, std::optional<std::uint64_t> warm) {
  ManagerOptions o;
  o.state_dir = state;
  o.agent_binary = agent;
  o.agent_args = {};
  o.spare = ManagerOptions::Spare::None;
  o.idle_timeout = std::chrono::milliseconds(0);
  o.checkpoint_interval = std::chrono::milliseconds(0);
  o.keep_snapshots = 1;
  o.warm_cache = warm;
  o.snapshot_timeout = std::chrono::minutes(30);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: restore_bench AGENT_BINARY [FILES] [FILE_BYTES] [ROUNDS]\n");
    return 2;
  }
  spdlog::set_level(std::getenv("BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  int files = argc > 2 ? std::atoi(argv[2]) : 100000;
  int file_bytes = argc > 3 ? std::atoi(argv[3]) : 10000;
  int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  const char* copied = std::getenv("AGENTBOX_TEST_AGENT");
  const char* agent = std::string(argv[1]) == "-" && copied ? copied : argv[1];
  char tmpl[] = "/tmp/agentbox-restore-bench-XXXXXX";
  fs::path state = mkdtemp(tmpl);
  if (geteuid() == 0) chmod(state.c_str(), 0711);
  fs::path work = state.string() + "-tar";
  fs::create_directories(work);
  std::vector<double> warm, cold, tar;
  {
    Manager manager(options_for(state, agent, std::uint64_t{64} << 30));
    {
    Lease lease = manager.acquire("bench");
    if (!agentbox::bench::make_workspace(lease.agent(), files, file_bytes)) return 1;
    fs::path workspace = manager.find("bench")->dirs().workspace();
    run("tar --zstd -cf " + (work / "tree.tar.zst").string() + " -C " + workspace.string() + " .");
    // The baseline first, before any teardown deleted a tree on this
    // filesystem: into fresh directories, deleted only at the end
    // (extracting right after deleting many files is slower on ext4, and
    // agentbox's cold restores pay that themselves).
    for (int r = 0; r < rounds; ++r) {
      fs::path into = work / ("x" + std::to_string(r));
      fs::create_directories(into);
      sync();
      auto start = Clock::now();
      run("tar --zstd -xf " + (work / "tree.tar.zst").string() + " -C " + into.string());
      tar.push_back(ms_since(start));
    }
    }
    for (int r = 0; r < rounds; ++r) warm.push_back(first_command_ms(manager, true));
  }
  {
    Manager manager(options_for(state, agent, 0));  // no warm copies: every restore extracts
    manager.acquire("bench");  // started on the live workspace the first manager left
    for (int r = 0; r < rounds; ++r) cold.push_back(first_command_ms(manager, false));
    manager.destroy("bench");
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::remove_all(state, ec);
  std::printf("restore -> first command of %d files: warm copy median %.0f ms (target <= 100); from the archive "
              "median %.0f ms; tar --zstd -xf of the same tree median %.0f ms; archive/tar ratio %.2f (target <= 1)\n",
              files, median(warm), median(cold), median(tar), median(cold) / median(tar));
  return 0;
}
