// The limits both sides of the wall agree on. The host decides every limit
// (sandbox/limits.h: memory, CPU and tmpfs sizes are the host's alone, applied
// through cgroups and the bwrap plan); the agent applies the in-box part,
// which the host passes on the agent's command line under the option names
// below (sandbox/limits.cpp writes them, agent/agent.cpp reads them), so the
// agent needs no configuration file inside the box.
#pragma once

#include <cstddef>
#include <cstdint>

namespace agentbox::contract {

// Defaults on both sides (docs/design.md section 8): what a result shows
// inline, and what a background process keeps of each stream (the first
// head bytes, then the last tail bytes).
inline constexpr std::size_t kInlineOutputChars = 30'000;
inline constexpr std::size_t kProcessHeadBytes = 64 * 1024;
inline constexpr std::size_t kProcessTailBytes = 1024 * 1024;
// An exec that names no timeout_ms.
inline constexpr std::int64_t kDefaultTimeoutMs = 120'000;

namespace agent_options {
inline constexpr const char* kNproc = "--nproc";    // RLIMIT_NPROC
inline constexpr const char* kFsize = "--fsize";    // RLIMIT_FSIZE, bytes
inline constexpr const char* kNofile = "--nofile";  // RLIMIT_NOFILE
inline constexpr const char* kData = "--data";      // RLIMIT_DATA, bytes; only without a memory cgroup
inline constexpr const char* kOutputChars = "--output-chars";
inline constexpr const char* kHeadBytes = "--head-bytes";
inline constexpr const char* kTailBytes = "--tail-bytes";
inline constexpr const char* kShellIdleMs = "--shell-idle-ms";        // 0: shells live as long as their session
inline constexpr const char* kWorkspaceLimit = "--workspace-limit";  // bytes, for NO_SPACE messages
inline constexpr const char* kNoSeccomp = "--no-seccomp";            // tests of the agent outside a box only
}  // namespace agent_options

}  // namespace agentbox::contract
