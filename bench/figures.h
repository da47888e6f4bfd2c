// What the C++ benchmarks compute from their samples.
#pragma once

#include <algorithm>
#include <chrono>
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

}  // namespace agentbox::bench
