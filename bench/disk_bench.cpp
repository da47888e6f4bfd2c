// What the workspace limit costs (sandbox/disk.h): a sandbox on its own
// ext4 image against one on plain directories, measured in the same run:
//   1. cold start: a new conversation's first call (exec true), spare none;
//   2. idle teardown (snapshot, stop, discard the live directories);
//   3. restore on the next call (a fresh image + unpack, or unpack);
// with a workspace of FILES small files. Medians, and image/plain ratios.
// Needs root (else both columns are plain directories; it says so).
// Usage: disk_bench AGENT_BINARY [rounds, default 10] [files, default 2000]
#include "bench/figures.h"
#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

using namespace agentbox::sandbox;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

using agentbox::bench::median;
using agentbox::bench::ms_since;

namespace {



struct Figures {
  std::vector<double> start, teardown, restore;
  bool limited = false;
};

Figures measure(const std::string& agent, std::uint64_t limit, int rounds, int files) {
  char tmpl[] = "/tmp/agentbox-disk-bench-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  Figures f;
  {
    ManagerOptions o;
    o.state_dir = dir;
    o.agent_binary = agent;
    o.agent_args = {};
    o.spare = ManagerOptions::Spare::None;
    o.disk.bytes = limit;
    Manager m(o);
    f.limited = m.disks().support().enabled;
    std::string fill = "mkdir -p /workspace/src && cd /workspace/src && i=0; while [ $i -lt " +
                       std::to_string(files) + " ]; do echo line $i > f$i; i=$((i+1)); done";
    for (int r = 0; r < rounds; ++r) {
      std::string c = "bench-" + std::to_string(r);
      auto t = Clock::now();
      {
        Lease lease = m.acquire(c);
        lease.agent().call("exec", {{"command", "true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
      }
      f.start.push_back(ms_since(t));
      {
        Lease lease = m.acquire(c);
        lease.agent().call("exec", {{"command", fill}, {"timeout_ms", 120000}}, std::chrono::seconds(150));
      }
      t = Clock::now();
      if (!m.teardown(c)) std::fprintf(stderr, "teardown of %s refused\n", c.c_str());
      f.teardown.push_back(ms_since(t));
      t = Clock::now();
      {
        Lease lease = m.acquire(c);
        lease.agent().call("exec", {{"command", "true"}, {"timeout_ms", 10000}}, std::chrono::seconds(30));
      }
      f.restore.push_back(ms_since(t));
      m.destroy(c);
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: disk_bench AGENT_BINARY [rounds] [files]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  int rounds = argc > 2 ? std::atoi(argv[2]) : 10;
  int files = argc > 3 ? std::atoi(argv[3]) : 2000;
  // Interleaved halves would share the page cache the same way; one after the
  // other is simpler and the plain run goes first (the colder one).
  Figures plain = measure(argv[1], 0, rounds, files);
  Figures image = measure(argv[1], 10ull << 30, rounds, files);
  if (!image.limited) std::printf("NOTE: no per-sandbox filesystem here (not root?): both columns are plain\n");
  std::printf("%d rounds, %d files in the workspace; medians in ms\n", rounds, files);
  std::printf("%-34s %10s %10s %8s\n", "", "plain", "10G image", "ratio");
  auto row = [](const char* name, const std::vector<double>& a, const std::vector<double>& b) {
    std::printf("%-34s %10.1f %10.1f %8.2f\n", name, median(a), median(b), median(b) / median(a));
  };
  row("cold start (first call, exec true)", plain.start, image.start);
  row("idle teardown", plain.teardown, image.teardown);
  row("restore on the next call", plain.restore, image.restore);
  return 0;
}
