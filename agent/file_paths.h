// Paths, errors and metadata for the agent's file operations (files.h).
//
// The agent runs inside the sandbox, so every path is already a sandbox path
// and a symlink resolves exactly as it does for a command: a link to
// /etc/shadow reaches the empty file bound over it, a link to a host path
// reaches nothing. What this module adds is the policy on top: a path is
// checked for NUL bytes and length, relative paths resolve against the
// session's cwd, and a write must land (after following symlinks) in one of
// the writable areas, so the agent's own /run/agentbox, /proc or /dev are
// never written through a tool even where the mount would allow it.
#pragma once

#include "contract/errors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <sys/stat.h>

namespace agentbox::agent {

// Where tools may write, as the sandbox mounts them (bwrap_plan.cpp).
inline constexpr const char* kWritableRoots[] = {"/workspace", "/home/user", "/tmp"};

// The path argument `name` of params, made absolute against cwd and checked
// (no NUL byte, not empty, at most PATH_MAX). Throws INVALID_ARGUMENTS.
std::string file_param_path(const nlohmann::json& params, const char* name, const std::string& cwd);

// Lexically normalised absolute path: "." and ".." and repeated "/" removed
// ("/workspace/../../etc" -> "/etc"). Symlinks are not looked at.
std::string normalize_path(const std::string& path);

// The path a write to `path` would change, following symlinks (a dangling
// final link included: writing through it creates its target, as `echo >`
// does). Throws PATH_OUTSIDE_SANDBOX when that lies outside kWritableRoots,
// SYMLINK_LOOP for a loop.
std::string writable_target(const std::string& path);
// For operations on the entry itself (delete, move, mkdir): the parent is
// resolved, the last component is not followed. Same errors as above; the
// writable roots themselves are refused unless allow_roots (mkdir -p).
std::string writable_entry(const std::string& path, bool allow_roots = false);

// A SandboxError for a failed system call on path, with the code a model can
// act on (ENOENT -> FILE_NOT_FOUND, EACCES -> PERMISSION_DENIED, ...).
SandboxError file_error(int err, const std::string& what, const std::string& path);
// The sandbox's workspace limit in bytes (agent --workspace-limit), named by
// the NO_SPACE error of file calls; 0 when the sandbox has none.
void set_workspace_limit(std::uint64_t bytes);

// error, with the session's cwd named when the call gave a relative path
// (`path`, `from` or `to`) and the error is about where that path led: a
// model that meant another directory then sees which one was used.
SandboxError with_cwd_note(const SandboxError& error, const nlohmann::json& params, const std::string& cwd);

// "file", "directory", "symlink" or "other" (docs/design.md section 8).
const char* file_type(mode_t mode);
// "0644"
std::string mode_string(mode_t mode);
// ISO 8601 UTC with milliseconds.
std::string iso_time(const struct timespec& t);
// type, size, mode, modified_at (and for a symlink: target).
nlohmann::json stat_json(const std::string& path, const struct stat& st);

// A MIME type from the first bytes and the file name; `text` says whether the
// content is valid UTF-8 without NUL bytes.
std::string guess_mime(const std::string& path, std::string_view head, bool text);

// Whether data is text: no NUL byte and valid UTF-8; allow_cut_end accepts a
// sequence cut off at the very end (a page boundary).
bool looks_text(std::string_view data, bool allow_cut_end = true);

}  // namespace agentbox::agent
