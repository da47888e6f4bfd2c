// File operations of the in-sandbox agent: file.read, file.write, file.edit,
// file.stat, file.list, file.mkdir, file.delete, file.move, file.search.
//
// They run inside the sandbox's namespaces with the same uid as commands, so
// they see exactly what a command sees (symlinks, permissions, read-only
// mounts); file_paths.h adds the policy (writable areas, path checks).
// Relative paths resolve against the session's working directory.
//
// Sizes: a read returns one page, a list or a search one page of entries,
// each within the inline cap as a result shows it (text and structuredContent
// together, output_buffer.h); `length`, max_entries and max_results only
// shrink a page, and a cursor or next_offset continues. Big files are written
// with append and read page by page. Writes replace
// a file atomically (a temporary file in the same directory renamed over it),
// see docs/files.md for the durability choice.
#pragma once

#include "agent/methods.h"
#include "agent/processes.h"

#include <cstdint>
#include <string_view>

namespace agentbox::agent {

inline constexpr std::size_t kMaxEditBytes = 16 << 20;        // file.edit loads the file whole
inline constexpr std::size_t kMaxListEntries = 10'000;
inline constexpr std::size_t kMaxSearchResults = 1'000;

// What every operation needs besides its parameters.
struct FileEnv {
  std::string cwd = "/workspace";     // the session's working directory
  std::size_t inline_chars = contract::kInlineOutputChars;  // the inline cap (shown_cost of a page)
};

json file_read(const json& params, const FileEnv& env);
json file_write(const json& params, const FileEnv& env);
json file_edit(const json& params, const FileEnv& env);
json file_stat(const json& params, const FileEnv& env);
json file_mkdir(const json& params, const FileEnv& env);
json file_delete(const json& params, const FileEnv& env);
json file_move(const json& params, const FileEnv& env);
json file_list(const json& params, const FileEnv& env);
json file_search(AgentRequest& request, const FileEnv& env);

void register_file_methods(MethodTable& table, SessionResolver resolve, const AgentConfig& config);

// A file replaced by a write or an edit keeps its blocks until its last
// reference goes, and freeing them can cost more than the write (~55 µs per
// file on a disk mounted with discard; milliseconds for a big file). The
// write holds the old file open and hands the descriptor here; after
// sending the reply, the thread that served the request passes what it
// holds to a closing thread (close_files_after_reply), so the next request
// does not wait for it either.
void close_after_reply(int fd);
void close_files_after_reply();

}  // namespace agentbox::agent
