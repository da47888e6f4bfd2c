// The baseline the cold-start benchmarks compare with (issue 6: "first call
// of a new conversation vs a bare `bwrap ... true`"): bubblewrap with the very
// plan a sandbox gets (namespaces, binds, generated /etc, dropped uid when
// root), running /bin/true instead of the agent. bench/sandbox_bench uses it
// directly, bench/exec_bench.mjs through `agentbox-bench-plan DIR`
// (bench/bench_plan_main.cpp): bench code, kept out of the product binary.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace agentbox::bench {

// Creates the sandbox directories under dir (owned by the sandbox uid 65534
// when running as root; dir's parent must then be traversable by it) and
// returns the bwrap argv, argv[0] the bwrap binary.
std::vector<std::string> bare_plan_argv(const std::filesystem::path& dir);

}  // namespace agentbox::bench
