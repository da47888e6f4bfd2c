// A snapshot of a running sandbox is one instant (docs/design.md section 9,
// "Consistent snapshots"): while a process writes a log line and then a
// counter, over and over, every snapshot holds them at most one step apart.
// Filler files between the two (the archive reads in name order) give a
// snapshot that is not frozen time to see them hundreds of steps apart.
// Run as root (the cgroup freezer) and as the normal user
// (run_unprivileged.sh: no cgroup here, the agent's SIGSTOP).
#include "fixture.h"

#include "persistence/archive.h"
#include "persistence/store.h"

#include <fstream>
#include <sstream>
#include <thread>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

}  // namespace

TEST_CASE("a snapshot of a sandbox whose process writes is one instant", "[snapshot][freeze]") {
  std::string why;
  if (!sandboxes_supported(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  ManagerOptions options;
  options.checkpoint_interval = std::chrono::milliseconds(0);
  SandboxFixture f(options);
  f.exec("mkdir -p /workspace/m && cd /workspace/m && for i in $(seq 1 3000); do echo $i > f$i; done");
  f.call("process.start", {{"command", "i=0; while :; do i=$((i+1)); echo $i >> /workspace/a-log; "
                                       "echo $i > /workspace/z-counter; done"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int round = 0; round < 5; ++round) {
    auto info = f.manager->snapshot("test", "", {});
    INFO("round " << round << ": " << info.freeze);
    REQUIRE(info.frozen.has_value());  // as root the cgroup freezer, as a normal user SIGSTOP
    CHECK(info.frozen->count() >= 0);
    CHECK((info.freeze == "cgroup freezer" || info.freeze == "SIGSTOP"));
    fs::path out = f.state_dir / ("extracted-" + std::to_string(round));
    {
      // Each snapshot after the first holds only the changes since the one
      // before: its restore extracts the chain.
      agentbox::persistence::StateLayout layout{f.state_dir};
      agentbox::persistence::Catalog catalog(layout.catalog());
      agentbox::persistence::SnapshotStore store(layout, catalog);
      agentbox::persistence::extract_layers(store.layers_of(info.record), out);
    }
    std::string log_last = last_line(read_text(out / "workspace/a-log"));
    std::string counter = last_line(read_text(out / "workspace/z-counter"));
    INFO("log ends at " << log_last << ", counter says '" << counter << "'");
    REQUIRE(!log_last.empty());
    // Frozen between the counter's truncation and its write, it is empty:
    // that is the middle of step log_last, still one instant.
    if (!counter.empty()) {
      long gap = std::stol(log_last) - std::stol(counter);
      CHECK(gap >= 0);
      CHECK(gap <= 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Thawed: the writer goes on after the last snapshot (its log grows).
  auto log_bytes = [&] { return f.exec("wc -c < /workspace/a-log")["stdout"].get<std::string>(); };
  std::string a = log_bytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(log_bytes() != a);
}
