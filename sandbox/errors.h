// Typed failures of the sandbox layer. Every error carries a stable code (the
// vocabulary of DESIGN.md section 8, e.g. SESSION_NOT_FOUND) and a message a
// model or a person can act on. The tools layer turns them into error results.
#pragma once

#include <stdexcept>
#include <string>

namespace agentbox::sandbox {

namespace codes {
inline constexpr const char* kSandboxStartFailed = "SANDBOX_START_FAILED";
inline constexpr const char* kSandboxFailed = "SANDBOX_FAILED";      // the agent died
inline constexpr const char* kSandboxBusy = "SANDBOX_BUSY";
inline constexpr const char* kSessionNotFound = "SESSION_NOT_FOUND";
inline constexpr const char* kSessionExists = "SESSION_EXISTS";
inline constexpr const char* kSessionBusy = "SESSION_BUSY";
inline constexpr const char* kProcessNotFound = "PROCESS_NOT_FOUND";
inline constexpr const char* kInvalidCwd = "INVALID_CWD";
inline constexpr const char* kInvalidArgument = "INVALID_ARGUMENT";
inline constexpr const char* kSpawnFailed = "SPAWN_FAILED";
inline constexpr const char* kAgentTimeout = "AGENT_TIMEOUT";
inline constexpr const char* kInternal = "INTERNAL";
inline constexpr const char* kSnapshotFailed = "SNAPSHOT_FAILED";      // could not write a snapshot
inline constexpr const char* kSnapshotNotFound = "SNAPSHOT_NOT_FOUND";
inline constexpr const char* kRestoreFailed = "RESTORE_FAILED";        // corrupt, malicious or missing archive
}  // namespace codes

class SandboxError : public std::runtime_error {
 public:
  SandboxError(std::string code, const std::string& message)
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// "what: strerror(errno)" for messages about a failed system call.
std::string errno_message(const std::string& what, int err);

}  // namespace agentbox::sandbox
