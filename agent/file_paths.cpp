#include "agent/file_paths.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <vector>

namespace agentbox::agent {

namespace {

constexpr int kMaxSymlinkHops = 40;  // the kernel's own limit (MAXSYMLINKS)

bool under_root(const std::string& path, bool allow_root_itself) {
  for (const char* root : kWritableRoots) {
    std::size_t n = std::strlen(root);
    if (path.compare(0, n, root) != 0) continue;
    if (path.size() == n) return allow_root_itself;
    if (path[n] == '/') return true;
  }
  return false;
}

std::string writable_list() { return "/workspace, /home/user and /tmp"; }

SandboxError outside(const std::string& requested, const std::string& resolved) {
  std::string via = requested == resolved ? "" : " (it resolves to " + resolved + ")";
  return SandboxError(codes::kPathOutsideSandbox, "cannot write " + requested + via + ": only " + writable_list() +
                                                      " are writable in the sandbox; the rest is read-only");
}

std::string join(const std::string& dir, const std::string& name) { return dir == "/" ? "/" + name : dir + "/" + name; }

std::string real_path(const std::string& path) {
  char buffer[PATH_MAX];
  if (!realpath(path.c_str(), buffer)) throw file_error(errno, "cannot resolve", path);
  return buffer;
}

// The real directory a path's last component lives in, and that component.
// Missing directories are allowed (writes create them): the deepest existing
// ancestor is resolved and the rest appended as written.
std::pair<std::string, std::string> resolve_parent(const std::string& absolute) {
  std::string path = absolute;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::size_t slash = path.rfind('/');
  std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  std::string last = path.substr(slash + 1);
  if (last.empty() || last == "." || last == "..") {
    std::string real = real_path(path);
    if (real == "/") return {"/", ""};
    slash = real.rfind('/');
    return {slash == 0 ? "/" : real.substr(0, slash), real.substr(slash + 1)};
  }
  std::string existing = dir, rest;
  while (access(existing.c_str(), F_OK) != 0) {
    if (errno != ENOENT) throw file_error(errno, "cannot resolve", dir);
    std::size_t cut = existing.rfind('/');
    rest = existing.substr(cut + 1) + (rest.empty() ? "" : "/" + rest);
    existing = cut == 0 ? "/" : existing.substr(0, cut);
  }
  std::string real = real_path(existing);
  if (!rest.empty()) real = normalize_path(join(real, rest));
  return {real, last};
}

}  // namespace

std::string file_param_path(const nlohmann::json& params, const char* name, const std::string& cwd) {
  if (!params.is_object() || !params.contains(name) || !params[name].is_string())
    throw SandboxError(codes::kInvalidArguments, std::string(name) + " is required and must be a string");
  std::string path = params[name].get<std::string>();
  if (path.empty()) throw SandboxError(codes::kInvalidArguments, std::string(name) + " is empty; name a file or directory");
  if (path.find('\0') != std::string::npos)
    throw SandboxError(codes::kInvalidArguments, std::string(name) + " contains a NUL byte, which no file name can hold");
  if (path[0] != '/') path = join(cwd, path);
  if (path.size() >= PATH_MAX)
    throw SandboxError(codes::kInvalidArguments, std::string(name) + " is " + std::to_string(path.size()) +
                                                " bytes long; paths are limited to " + std::to_string(PATH_MAX - 1));
  return path;
}

std::string normalize_path(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

std::string writable_target(const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    auto [dir, last] = resolve_parent(current);
    std::string candidate = last.empty() ? dir : join(dir, last);
    struct stat st;
    if (lstat(candidate.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      if (!under_root(candidate, true)) throw outside(path, candidate);
      return candidate;
    }
    char target[PATH_MAX];
    ssize_t n = readlink(candidate.c_str(), target, sizeof target - 1);
    if (n < 0) throw file_error(errno, "cannot read link", candidate);
    std::string link(target, static_cast<std::size_t>(n));
    current = link.empty() || link[0] != '/' ? join(dir, link) : link;
  }
  throw SandboxError(codes::kSymlinkLoop, "too many levels of symbolic links resolving " + path);
}

std::string writable_entry(const std::string& path, bool allow_roots) {
  auto [dir, last] = resolve_parent(path);
  std::string entry = last.empty() ? dir : join(dir, last);
  if (!under_root(entry, allow_roots)) {
    if (under_root(entry, true))
      throw SandboxError(codes::kPermissionDenied, entry + " is one of the sandbox's top directories (" +
                                                       writable_list() + ") and cannot be removed, moved or replaced");
    throw outside(path, entry);
  }
  return entry;
}

namespace {
std::uint64_t workspace_limit = 0;

// /workspace, /home/user and /tmp share the sandbox's own filesystem.
bool on_workspace_disk(const std::string& path) {
  for (std::string root : {"/workspace", "/home/user", "/tmp"})
    if (path.rfind(root, 0) == 0 && (path.size() == root.size() || path[root.size()] == '/')) return true;
  return false;
}
}  // namespace

void set_workspace_limit(std::uint64_t bytes) { workspace_limit = bytes; }

SandboxError file_error(int err, const std::string& what, const std::string& path) {
  std::string message = what + " " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOENT: return SandboxError(codes::kFileNotFound, path + " does not exist");
    case EACCES:
    case EPERM: return SandboxError(codes::kPermissionDenied, message);
    case EEXIST: return SandboxError(codes::kFileExists, message);
    case EISDIR: return SandboxError(codes::kIsDirectory, message);
    case ENOTDIR: return SandboxError(codes::kNotDirectory, message + " (a component of the path is a file)");
    case ENOTEMPTY: return SandboxError(codes::kDirectoryNotEmpty, message);
    case ELOOP: return SandboxError(codes::kSymlinkLoop, message);
    case ENAMETOOLONG: return SandboxError(codes::kInvalidArguments, message + " (a name is limited to 255 bytes)");
    case EROFS: return SandboxError(codes::kPathOutsideSandbox, message + "; only " + writable_list() + " are writable");
    case ENOSPC:
    case EDQUOT:
      if (workspace_limit == 0 || !on_workspace_disk(path)) return SandboxError(codes::kNoSpace, message);
      return SandboxError(codes::kNoSpace, message + ": the sandbox's workspace limit of " +
                                               std::to_string(workspace_limit >> 20) + " MiB (/workspace, /home/user "
                                               "and /tmp together) is reached; delete files to free space");
    case EFBIG: return SandboxError(codes::kFileTooLarge, message + " (the sandbox's file size limit)");
    case EBUSY: return SandboxError(codes::kPermissionDenied, message + " (a mount point)");
    default: return SandboxError(codes::kIoError, message);
  }
}

SandboxError with_cwd_note(const SandboxError& error, const nlohmann::json& params, const std::string& cwd) {
  static const std::string kAbout[] = {codes::kFileNotFound, codes::kIsDirectory, codes::kNotDirectory,
                                       codes::kFileExists};
  if (std::find(std::begin(kAbout), std::end(kAbout), error.code()) == std::end(kAbout)) return error;
  for (const char* name : {"path", "from", "to"}) {
    auto it = params.is_object() ? params.find(name) : params.end();
    if (it == params.end() || !it->is_string()) continue;
    const auto& value = it->get_ref<const std::string&>();
    if (!value.empty() && value[0] != '/')
      return SandboxError(error.code(),
                          std::string(error.what()) + " (relative paths resolve against the session's cwd " + cwd + ")");
  }
  return error;
}

const char* file_type(mode_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "symlink";
  return "other";
}

std::string mode_string(mode_t mode) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "%04o", static_cast<unsigned>(mode & 07777));
  return buffer;
}

std::string iso_time(const struct timespec& t) {
  struct tm tm;
  gmtime_r(&t.tv_sec, &tm);
  char buffer[40];
  std::size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buffer + n, sizeof buffer - n, ".%03ldZ", t.tv_nsec / 1'000'000);
  return buffer;
}

nlohmann::json stat_json(const std::string& path, const struct stat& st) {
  nlohmann::json j = {{"type", file_type(st.st_mode)},
                      {"size", static_cast<std::uint64_t>(st.st_size)},
                      {"mode", mode_string(st.st_mode)},
                      {"modified_at", iso_time(st.st_mtim)}};
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n >= 0) j["target"] = std::string(target, static_cast<std::size_t>(n));
  }
  return j;
}

bool looks_text(std::string_view data, bool allow_cut_end) {
  std::size_t i = 0, n = data.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(data[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = c >= 0xF5 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if (i + k >= n) return allow_cut_end;  // cut at the end of a page
      auto d = static_cast<unsigned char>(data[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      // Overlong forms, surrogates and code points over U+10FFFF.
      if (k == 1 && ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) ||
                     (c == 0xF4 && d > 0x8F)))
        return false;
    }
    i += len;
  }
  return true;
}

std::string guess_mime(const std::string& path, std::string_view head, bool text) {
  static const std::pair<std::string_view, const char*> magic[] = {
      {"\x89PNG", "image/png"},         {"\xFF\xD8\xFF", "image/jpeg"},       {"GIF8", "image/gif"},
      {"%PDF", "application/pdf"},      {"PK\x03\x04", "application/zip"},    {"\x1F\x8B", "application/gzip"},
      {"\x7F" "ELF", "application/x-executable"}, {"BZh", "application/x-bzip2"},
      {"\xFD" "7zXZ", "application/x-xz"}, {"\x28\xB5\x2F\xFD", "application/zstd"},
      {std::string_view("\0asm", 4), "application/wasm"}, {std::string_view("SQLite format 3\0", 16), "application/vnd.sqlite3"},
  };
  for (const auto& [prefix, type] : magic)
    if (head.substr(0, prefix.size()) == prefix) return type;
  if (head.size() >= 12 && head.substr(0, 4) == "RIFF" && head.substr(8, 4) == "WEBP") return "image/webp";
  static const std::pair<const char*, const char*> extensions[] = {
      {".json", "application/json"}, {".md", "text/markdown"},       {".html", "text/html"},
      {".htm", "text/html"},         {".css", "text/css"},           {".js", "text/javascript"},
      {".mjs", "text/javascript"},   {".ts", "text/x-typescript"},   {".py", "text/x-python"},
      {".c", "text/x-c"},            {".h", "text/x-c"},             {".cpp", "text/x-c++"},
      {".hpp", "text/x-c++"},        {".rs", "text/x-rust"},         {".go", "text/x-go"},
      {".java", "text/x-java"},      {".sh", "text/x-shellscript"},  {".xml", "application/xml"},
      {".svg", "image/svg+xml"},     {".yaml", "application/yaml"},  {".yml", "application/yaml"},
      {".toml", "application/toml"}, {".csv", "text/csv"},           {".txt", "text/plain"},
  };
  std::size_t dot = path.rfind('.');
  if (dot != std::string::npos && path.find('/', dot) == std::string::npos) {
    std::string ext = path.substr(dot);
    for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const auto& [e, type] : extensions)
      if (ext == e && (text || std::strncmp(type, "text/", 5) != 0)) return type;
  }
  return text ? "text/plain" : "application/octet-stream";
}

}  // namespace agentbox::agent
