// The entry rules of snapshots, shared by the writer (archive_write.cpp) and
// the reader (archive_read.cpp): what restore refuses, the snapshot refuses
// first, so an idle teardown never removes a workspace for an archive that
// cannot come back (docs/design.md section 4; issue 12 point 4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace agentbox::persistence {

// An entry's whole path ("workspace/a/b"): longer ones cannot be handed to
// the kernel in one call, which libarchive's extraction needs for directories.
inline constexpr std::size_t kMaxEntryPath = 4096;
// One component (NAME_MAX of every Linux filesystem).
inline constexpr std::size_t kMaxEntryName = 255;
// Contents a restore unpacks at most (ExtractOptions::max_bytes).
inline constexpr std::uint64_t kMaxRestoreBytes = std::uint64_t{1} << 40;

// A path for a message: at most 120 bytes, its start and its end kept.
inline std::string shorten_path(const std::string& p) {
  return p.size() <= 120 ? p : p.substr(0, 60) + "…" + p.substr(p.size() - 55);
}

// "" when `path` is acceptable: relative, no ".." component, no component
// over kMaxEntryName, at most kMaxEntryPath bytes, and under one of the
// expected top-level names.
inline std::string entry_path_problem(const std::string& p, const std::vector<std::string>& tops) {
  if (p.empty()) return "an entry has no name";
  std::string shown = "'" + shorten_path(p) + "'";
  if (p.size() > kMaxEntryPath)
    return "entry " + shown + " (" + std::to_string(p.size()) + " bytes) is longer than " +
           std::to_string(kMaxEntryPath) + " bytes, the longest path a snapshot restores";
  if (p[0] == '/') return "entry " + shown + " has an absolute path";
  std::size_t start = 0;
  bool first = true;
  while (start <= p.size()) {
    std::size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string part = p.substr(start, end - start);
    if (part == "..") return "entry " + shown + " climbs out with '..'";
    if (part.size() > kMaxEntryName) return "entry " + shown + " has a component longer than 255 bytes";
    if (first) {
      bool known = false;
      for (const auto& t : tops) known |= part == t;
      if (!known) return "entry " + shown + " is outside the expected directories";
      first = false;
    }
    start = end + 1;
  }
  return "";
}

}  // namespace agentbox::persistence
