// The one error vocabulary of agentbox, on both sides of the wall: the agent
// throws these in the box and sends the code as error.data.code
// (contract/agent_methods.h), the host side throws them too, and the tools
// layer turns them into error results (docs/protocol.md, "Error results",
// lists when each code is used). The codes below are the whole vocabulary,
// one spelling each. In namespace agentbox itself: every layer names them.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace agentbox {

namespace codes {
// Arguments and paths.
inline constexpr const char* kInvalidArguments = "INVALID_ARGUMENTS";
inline constexpr const char* kFileNotFound = "FILE_NOT_FOUND";
inline constexpr const char* kIsDirectory = "IS_DIRECTORY";
inline constexpr const char* kNotDirectory = "NOT_DIRECTORY";
inline constexpr const char* kFileExists = "FILE_EXISTS";
inline constexpr const char* kPermissionDenied = "PERMISSION_DENIED";
inline constexpr const char* kPathOutsideSandbox = "PATH_OUTSIDE_SANDBOX";  // outside the writable areas
inline constexpr const char* kSymlinkLoop = "SYMLINK_LOOP";
inline constexpr const char* kDirectoryNotEmpty = "DIRECTORY_NOT_EMPTY";
inline constexpr const char* kBinaryFile = "BINARY_FILE";
inline constexpr const char* kFileTooLarge = "FILE_TOO_LARGE";
inline constexpr const char* kNoSpace = "NO_SPACE";
inline constexpr const char* kIoError = "IO_ERROR";
inline constexpr const char* kAmbiguousMatch = "AMBIGUOUS_MATCH";  // file_edit: old_string occurs more than once
inline constexpr const char* kNoMatch = "NO_MATCH";                // file_edit: old_string does not occur
// Sessions, processes, snapshots.
inline constexpr const char* kInvalidCwd = "INVALID_CWD";
inline constexpr const char* kSessionNotFound = "SESSION_NOT_FOUND";
inline constexpr const char* kSessionExists = "SESSION_EXISTS";
inline constexpr const char* kProcessNotFound = "PROCESS_NOT_FOUND";
inline constexpr const char* kTerminalNotFound = "TERMINAL_NOT_FOUND";
inline constexpr const char* kWatchNotFound = "WATCH_NOT_FOUND";
inline constexpr const char* kPortNotExposed = "PORT_NOT_EXPOSED";
inline constexpr const char* kPortUnavailable = "PORT_UNAVAILABLE";  // the host port cannot be listened on
inline constexpr const char* kContextNotFound = "CONTEXT_NOT_FOUND";  // code contexts
inline constexpr const char* kContextBusy = "CONTEXT_BUSY";          // a cell of the context is running
inline constexpr const char* kSnapshotNotFound = "SNAPSHOT_NOT_FOUND";
inline constexpr const char* kSnapshotCorrupt = "SNAPSHOT_CORRUPT";    // damaged, malicious or missing archive
inline constexpr const char* kSnapshotFailed = "SNAPSHOT_FAILED";      // could not write a snapshot
// The sandbox itself.
inline constexpr const char* kSandboxStartFailed = "SANDBOX_START_FAILED";
inline constexpr const char* kSandboxFailed = "SANDBOX_FAILED";      // the agent died
inline constexpr const char* kSandboxBusy = "SANDBOX_BUSY";
inline constexpr const char* kSandboxUnavailable = "SANDBOX_UNAVAILABLE";  // a server without sandboxes
inline constexpr const char* kSpawnFailed = "SPAWN_FAILED";
inline constexpr const char* kAgentTimeout = "AGENT_TIMEOUT";
inline constexpr const char* kInternal = "INTERNAL";

inline constexpr const char* kAll[] = {
    kInvalidArguments, kFileNotFound, kIsDirectory, kNotDirectory, kFileExists, kPermissionDenied,
    kPathOutsideSandbox, kSymlinkLoop, kDirectoryNotEmpty, kBinaryFile, kFileTooLarge, kNoSpace,
    kIoError, kAmbiguousMatch, kNoMatch, kInvalidCwd, kSessionNotFound, kSessionExists,
    kProcessNotFound, kTerminalNotFound, kWatchNotFound, kPortNotExposed, kPortUnavailable, kContextNotFound, kContextBusy,
    kSnapshotNotFound, kSnapshotCorrupt, kSnapshotFailed, kSandboxStartFailed,
    kSandboxFailed, kSandboxBusy, kSandboxUnavailable, kSpawnFailed, kAgentTimeout, kInternal};

// Whether code is one of the above. A code from the sandbox's agent that is
// not is reported as INTERNAL: the box does not extend the vocabulary.
bool known(std::string_view code);
}  // namespace codes

class SandboxError : public std::runtime_error {
 public:
  SandboxError(std::string code, const std::string& message)
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

}  // namespace agentbox
