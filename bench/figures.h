// What the C++ benchmarks compute from their samples.
#pragma once

#include "sandbox/agent_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace agentbox::bench {

// The median of the samples (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Milliseconds since t.
inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Runs a shell command the benchmark needs (tar, the baseline); exits the
// benchmark when it fails.
inline void run(const std::string& command) {
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", command.c_str());
    std::exit(1);
  }
}

// Waits (up to 10 min) until no .trash-* directory is left under
// `sandboxes`: what a restore replaced is deleted in the background, and a
// restore racing that deletion on the same filesystem measures the race.
inline void wait_for_trash(const std::filesystem::path& sandboxes) {
  for (int i = 0; i < 6000; ++i) {
    bool trash = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(sandboxes, ec))
      trash |= e.path().filename().string().rfind(".trash-", 0) == 0;
    if (!trash) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Makes /workspace/t in a sandbox: `files` files of `file_bytes`, a
// thousand to a directory, half text-like and half random bytes
// (compressible, not trivially), and prints their size; false (said on
// stderr) when it could not.
inline bool make_workspace(agentbox::sandbox::AgentClient& agent, int files, int file_bytes) {
  std::string make = "python3 -c \"import os\nblock = os.urandom(" + std::to_string(file_bytes / 2) +
                     ")\nfor d in range(" + std::to_string((files + 999) / 1000) +
                     "):\n os.makedirs(f'/workspace/t/d{d}', exist_ok=True)\nfor i in range(" +
                     std::to_string(files) + "):\n open(f'/workspace/t/d{i // 1000}/f{i}', 'wb').write(block[i % 97:] + "
                     "(b'line %d of the file\\\\n' % i) * " + std::to_string(file_bytes / 40) + ")\"";
  auto made = agent.call("exec", {{"command", make}, {"timeout_ms", 1800000}}, std::chrono::minutes(31));
  if (made.value("exit_code", 1) != 0) {
    std::fprintf(stderr, "could not make the workspace: %s\n", made.dump().c_str());
    return false;
  }
  auto du = agent.call("exec", {{"command", "du -sm /workspace | cut -f1"}}, std::chrono::minutes(5));
  std::printf("workspace: %d files, %s MB\n", files, du.value("stdout", "?\n").c_str());
  return true;
}

}  // namespace agentbox::bench
