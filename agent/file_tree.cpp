// file.stat, file.mkdir, file.delete, file.move, file.list, file.search
// (files.h): operations on entries and trees.
#include "agent/files.h"

#include "os/utf8.h"
#include "agent/file_paths.h"
#include "agent/line_pattern.h"
#include "agent/path_glob.h"
#include "agent/output_buffer.h"

#include <algorithm>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>
#include <unistd.h>

namespace agentbox::agent {

namespace fs = std::filesystem;

namespace {

bool has(const json& params, const char* name) { return params.contains(name) && !params[name].is_null(); }

std::string join(const std::string& dir, const std::string& name) { return dir == "/" ? "/" + name : dir + "/" + name; }

// Sorted names in dir ("." and ".." left out); errno set and nullopt when it
// cannot be opened.
std::optional<std::vector<std::string>> read_names(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return std::nullopt;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Depth-first, children in byte order, symlinks not followed (a link loop or
// a link to / cannot make a walk endless). visit returns false to stop.
// The order is that of paths compared component by component, so a page of
// a list or a search resumes after the path its cursor names: entries up to
// `after` (components below the root) are skipped, unopened; with
// visit_after the entry `after` itself is visited again (a search goes on
// inside that file).
struct Walk {
  std::size_t max_depth = 64;
  bool include_hidden = true;
  bool skip_git = false;
  std::vector<std::string> after;
  bool visit_after = false;
  std::function<bool(const std::string& path, const std::string& name, const struct stat& st, std::size_t depth)> visit;
  std::function<void(const std::string& dir, int err)> unreadable;
  bool stopped = false;

  void run(const std::string& dir, std::size_t depth) { walk(dir, depth, !after.empty()); }

 private:
  void walk(const std::string& dir, std::size_t depth, bool on_cursor) {
    auto names = read_names(dir);
    if (!names) {
      if (unreadable) unreadable(dir, errno);
      return;
    }
    for (const auto& name : *names) {
      if (stopped) return;
      if (!include_hidden && name[0] == '.') continue;
      if (skip_git && name == ".git") continue;
      bool on_path = false;  // this entry is the cursor or holds it
      if (on_cursor) {
        if (name < after[depth]) continue;
        on_path = name == after[depth];
        on_cursor = on_path;
      }
      bool is_cursor = on_path && depth + 1 == after.size();
      std::string path = join(dir, name);
      struct stat st;
      if (lstat(path.c_str(), &st) != 0) continue;  // removed while we looked
      if ((!on_path || (is_cursor && visit_after)) && !visit(path, name, st, depth)) {
        stopped = true;
        return;
      }
      if (S_ISDIR(st.st_mode) && depth + 1 < max_depth) walk(path, depth + 1, on_path && !is_cursor);
    }
  }
};

// A cursor is a path below root; its components below root.
std::vector<std::string> cursor_components(const std::string& root, const std::string& cursor) {
  if (cursor.empty()) return {};
  std::string prefix = root == "/" ? "/" : root + "/";
  if (cursor.compare(0, prefix.size(), prefix) != 0 || cursor.size() == prefix.size())
    throw SandboxError(codes::kInvalidArguments, "cursor " + cursor + " is not below " + root +
                                                    ": pass the next_cursor of the previous page with the same path");
  std::vector<std::string> parts;
  std::size_t from = prefix.size();
  for (std::size_t slash; (slash = cursor.find('/', from)) != std::string::npos; from = slash + 1)
    parts.push_back(cursor.substr(from, slash - from));
  parts.push_back(cursor.substr(from));
  for (const auto& part : parts)
    if (part.empty()) throw SandboxError(codes::kInvalidArguments, "cursor " + cursor + " has an empty component");
  return parts;
}

// What an entry of a list or a search costs in its result: its JSON and the
// text line tools/file_tools.cpp writes for it (at most its strings, counted
// JSON-escaped since bytes that are not UTF-8 become U+FFFD, and 24
// characters).
std::size_t entry_cost(const json& entry, std::size_t line_chars) { return entry.dump().size() + line_chars + 24; }

// Whether an entry fits a page that has used `used`: with room for its path
// as the next cursor (in next_cursor and in the text's last line), should
// it be the last. The first entry always goes in.
bool fits(std::size_t used, std::size_t cost, const std::string& path, std::size_t cap, bool first) {
  return first || used + cost + 2 * (json(path).dump().size() + 8) <= cap;
}

constexpr std::size_t kMaxUnreadable = 20;  // directories named in a list's `unreadable`

std::size_t bounded(const json& params, const char* name, std::size_t fallback, std::size_t max) {
  std::int64_t v = param_int(params, name, static_cast<std::int64_t>(fallback));
  if (v < 1) throw SandboxError(codes::kInvalidArguments, std::string(name) + " must be at least 1");
  return std::min<std::size_t>(static_cast<std::size_t>(v), max);
}

}  // namespace

json file_stat(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return {{"path", path}, {"exists", false}};
    throw file_error(errno, "cannot stat", path);
  }
  json result = stat_json(path, st);
  result["path"] = path;
  result["exists"] = true;
  if (S_ISLNK(st.st_mode)) {
    struct stat target;
    if (stat(path.c_str(), &target) == 0) {
      result["target_type"] = file_type(target.st_mode);
      char real[PATH_MAX];
      if (realpath(path.c_str(), real)) result["resolved"] = real;
    } else {
      result["target_type"] = errno == ELOOP ? "loop" : "missing";
    }
  }
  return result;
}

json file_mkdir(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  bool recursive = params.value("recursive", false);
  std::string entry = writable_entry(path, true);
  struct stat st;
  if (lstat(entry.c_str(), &st) == 0) {
    if (recursive && S_ISDIR(st.st_mode)) return {{"path", entry}, {"created", false}};
    throw SandboxError(codes::kFileExists, path + " already exists" + (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  if (recursive) {
    std::size_t slash = 0;
    while ((slash = entry.find('/', slash + 1)) != std::string::npos) {
      std::string dir = entry.substr(0, slash);
      if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) throw file_error(errno, "cannot create directory", dir);
    }
  }
  if (mkdir(entry.c_str(), 0777) != 0) {
    if (errno == ENOENT)
      throw SandboxError(codes::kFileNotFound, "the parent of " + path + " does not exist; pass recursive: true to create it too");
    throw file_error(errno, "cannot create directory", path);
  }
  return {{"path", entry}, {"created", true}};
}

json file_delete(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  std::string entry = writable_entry(path);
  struct stat st;
  if (lstat(entry.c_str(), &st) != 0) throw file_error(errno, "cannot delete", path);
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(entry.c_str()) != 0) throw file_error(errno, "cannot delete", path);
    return {{"path", entry}, {"deleted", true}, {"entries", 1}};
  }
  if (!params.value("recursive", false))
    throw SandboxError(codes::kIsDirectory, path + " is a directory; pass recursive: true to delete it and everything in it");
  // remove_all does not follow symlinks: a link to / inside the tree is
  // removed, not what it points to.
  std::error_code ec;
  auto removed = fs::remove_all(entry, ec);
  if (ec) throw file_error(ec.value(), "cannot delete everything in", path);
  return {{"path", entry}, {"deleted", true}, {"entries", static_cast<std::uint64_t>(removed)}};
}

json file_move(const json& params, const FileEnv& env) {
  std::string from = writable_entry(file_param_path(params, "from", env.cwd));
  std::string to = writable_entry(file_param_path(params, "to", env.cwd));
  bool overwrite = params.value("overwrite", false);
  struct stat st;
  if (lstat(from.c_str(), &st) != 0) throw file_error(errno, "cannot move", from);
  if (from == to) return {{"from", from}, {"to", to}};
  if (S_ISDIR(st.st_mode) && to.compare(0, from.size() + 1, from + "/") == 0)
    throw SandboxError(codes::kInvalidArguments, "cannot move " + from + " into itself (" + to + ")");
  struct stat existing;
  bool exists = lstat(to.c_str(), &existing) == 0;
  if (exists && !overwrite)
    throw SandboxError(codes::kFileExists, to + " already exists; pass overwrite: true to replace it");
  for (std::size_t slash = 0; (slash = to.find('/', slash + 1)) != std::string::npos;) {
    std::string dir = to.substr(0, slash);
    if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) throw file_error(errno, "cannot create directory", dir);
  }
  int rc = overwrite ? rename(from.c_str(), to.c_str())
                     : renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && errno == EXDEV) {
    // /workspace, /home/user and /tmp are separate mounts: copy, then delete.
    std::error_code ec;
    if (exists) fs::remove_all(to, ec);
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec) throw file_error(ec.value(), "cannot copy " + from + " to", to);
    fs::remove_all(from, ec);
    if (ec) throw file_error(ec.value(), "copied to " + to + " but cannot remove", from);
    rc = 0;
  }
  if (rc != 0) throw file_error(errno, "cannot move " + from + " to", to);
  return {{"from", from}, {"to", to}};
}

json file_list(const json& params, const FileEnv& env) {
  std::string path = has(params, "path") ? file_param_path(params, "path", env.cwd) : env.cwd;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw file_error(errno, "cannot list", path);
  if (!S_ISDIR(st.st_mode)) throw SandboxError(codes::kNotDirectory, path + " is not a directory; use file_stat or file_read");
  std::size_t max_entries = bounded(params, "max_entries", 1000, kMaxListEntries);
  Walk walk;
  walk.include_hidden = params.value("include_hidden", false);
  walk.max_depth = params.value("recursive", false) ? bounded(params, "max_depth", 10, 64) : 1;
  walk.after = cursor_components(path, param_string(params, "cursor", ""));
  json entries = json::array();
  bool truncated = false;
  std::size_t used = 0;
  walk.visit = [&](const std::string& p, const std::string& name, const struct stat& s, std::size_t) {
    json e = stat_json(p, s);
    e["name"] = name;
    e["path"] = p;
    std::size_t cost = entry_cost(e, json(p).dump().size() + (e.contains("target") ? e["target"].dump().size() : 0));
    if (entries.size() >= max_entries || !fits(used, cost, p, env.inline_chars, entries.empty())) {
      truncated = true;
      return false;
    }
    used += cost;
    entries.push_back(std::move(e));
    return true;
  };
  json unreadable = json::array();
  walk.unreadable = [&](const std::string& dir, int err) {
    if (dir == path) throw file_error(err, "cannot list", path);
    if (unreadable.size() < kMaxUnreadable) unreadable.push_back(dir);
  };
  walk.run(path, 0);
  json result = {{"path", path}, {"truncated", truncated}};
  if (truncated) result["next_cursor"] = entries.back()["path"];
  result["entries"] = std::move(entries);
  if (!unreadable.empty()) result["unreadable"] = std::move(unreadable);
  return result;
}

namespace {

constexpr std::size_t kMaxLineChars = 500;
constexpr std::size_t kBinaryProbe = 8192;          // grep's test: a NUL byte near the start
constexpr std::uint64_t kMaxSearchFileBytes = 64 << 20;
constexpr std::size_t kMaxFilesScanned = 200'000;


bool read_whole(const std::string& path, std::uint64_t size, std::string& buffer) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  buffer.resize(size);
  std::size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buffer.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  buffer.resize(got);
  return true;
}

}  // namespace

json file_search(AgentRequest& request, const FileEnv& env) {
  const json& params = request.params();
  std::string pattern = require_string(params, "pattern");
  LinePattern regex(pattern, params.value("case_insensitive", false));
  std::string root = has(params, "path") ? file_param_path(params, "path", env.cwd) : env.cwd;
  std::string glob = param_string(params, "glob", "");
  std::size_t max_results = bounded(params, "max_results", 100, kMaxSearchResults);
  struct stat st;
  if (stat(root.c_str(), &st) != 0) throw file_error(errno, "cannot search", root);

  // The cursor "<path>:<line>" resumes after that line of that file.
  std::string cursor = param_string(params, "cursor", "");
  std::string cursor_path;
  std::size_t cursor_line = 0;
  if (!cursor.empty()) {
    std::size_t colon = cursor.rfind(':');
    std::string digits = colon == std::string::npos ? "" : cursor.substr(colon + 1);
    if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw SandboxError(codes::kInvalidArguments, "cursor must be the next_cursor of the previous page (\"<path>:<line>\")");
    cursor_path = cursor.substr(0, colon);
    cursor_line = std::stoull(digits);
  }
  json matches = json::array();
  bool truncated = false;
  std::string next_cursor;
  std::size_t scanned = 0, skipped_binary = 0, skipped_large = 0, used = 0;
  std::string buffer;
  auto search_file = [&](const std::string& path, std::uint64_t size) {
    if (size > kMaxSearchFileBytes) {
      ++skipped_large;
      return true;
    }
    if (!read_whole(path, size, buffer)) return true;
    ++scanned;
    if (std::memchr(buffer.data(), '\0', std::min(buffer.size(), kBinaryProbe))) {
      ++skipped_binary;
      return true;
    }
    const char* data = buffer.data();
    const char* end = data + buffer.size();
    std::size_t line = 1, skip_to = path == cursor_path ? cursor_line : 0;
    for (const char* at = data; at < end; ++line) {
      const char* nl = static_cast<const char*>(std::memchr(at, '\n', static_cast<std::size_t>(end - at)));
      const char* line_end = nl ? nl : end;
      if (line > skip_to && regex.matches(at, line_end)) {
        std::string_view text(at, static_cast<std::size_t>(line_end - at));
        if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
        json m = {{"path", path}, {"line", line}, {"text", std::string(os::utf8_prefix(text, kMaxLineChars))}};
        if (text.size() > kMaxLineChars) m["text_truncated"] = true;
        std::size_t cost = entry_cost(m, json(path).dump().size() + m["text"].dump().size());
        if (matches.size() >= max_results || !fits(used, cost, path + ":" + std::to_string(line), env.inline_chars, matches.empty())) {
          truncated = true;
          next_cursor = matches.back()["path"].get<std::string>() + ":" + std::to_string(matches.back()["line"].get<std::size_t>());
          return false;
        }
        used += cost;
        matches.push_back(std::move(m));
      }
      at = line_end + 1;
    }
    return true;
  };
  PathGlob path_glob(glob);
  auto glob_matches = [&](const std::string& path, const std::string& name) {
    return path_glob.matches(path.size() > root.size() ? path.substr(root.size()) : name);
  };

  if (S_ISREG(st.st_mode)) {
    search_file(root, static_cast<std::uint64_t>(st.st_size));
  } else if (S_ISDIR(st.st_mode)) {
    Walk walk;
    walk.skip_git = true;
    walk.include_hidden = params.value("include_hidden", true);
    walk.after = cursor_components(root, cursor_path);
    walk.visit_after = true;
    walk.visit = [&](const std::string& p, const std::string& name, const struct stat& s, std::size_t) {
      if (request.cancelled() || scanned >= kMaxFilesScanned) {
        truncated = true;
        next_cursor = p + ":0";  // this file and the rest are not searched yet
        return false;
      }
      if (!S_ISREG(s.st_mode) || !glob_matches(p, name)) return true;
      return search_file(p, static_cast<std::uint64_t>(s.st_size));
    };
    walk.run(root, 0);
  } else {
    throw SandboxError(codes::kInvalidArguments, root + " is neither a file nor a directory");
  }
  json result = {{"matches", std::move(matches)},   {"truncated", truncated},
                 {"files_searched", scanned},       {"skipped_binary", skipped_binary},
                 {"skipped_large", skipped_large}};
  if (!next_cursor.empty()) result["next_cursor"] = next_cursor;
  return result;
}

}  // namespace agentbox::agent
