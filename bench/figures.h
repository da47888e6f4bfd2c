// What the C++ benchmarks compute from their samples.
#pragma once

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

}  // namespace agentbox::bench
