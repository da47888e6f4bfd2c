// file.edit (files.h): exact string replacement, with a diff of what changed.
#include "agent/files.h"

#include "agent/file_io.h"
#include "agent/file_paths.h"
#include "os/unique_fd.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace agentbox::agent {

namespace {

constexpr std::size_t kDiffContext = 3;
constexpr std::size_t kMaxDiffChars = 4000;

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t nl = s.find('\n', i);
    std::size_t end = nl == std::string_view::npos ? s.size() : nl + 1;
    lines.push_back(s.substr(i, end - i));
    i = end;
  }
  return lines;
}

void diff_line(std::string& out, char tag, std::string_view line) {
  out += tag;
  out += line;
  if (line.empty() || line.back() != '\n') out += "\n\\ No newline at end of file\n";
}

// A unified diff of the replacements at `positions`, built from the matches
// themselves (no general diff needed): each hunk covers the lines a group of
// nearby matches touches, with three lines of context.
std::string edit_diff(const std::string& path, const std::string& before, const std::vector<std::size_t>& positions,
                      std::size_t old_len, const std::string& replacement) {
  std::vector<std::size_t> starts{0};
  for (std::size_t i = 0; i + 1 < before.size(); ++i)
    if (before[i] == '\n') starts.push_back(i + 1);
  auto line_of = [&](std::size_t pos) {
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin() - 1);
  };
  struct Group {
    std::size_t first, last;
    std::vector<std::size_t> positions;
  };
  std::vector<Group> groups;
  for (std::size_t p : positions) {
    std::size_t a = line_of(p), b = line_of(p + old_len - 1);
    if (!groups.empty() && a <= groups.back().last + 2 * kDiffContext + 1) {
      groups.back().last = std::max(groups.back().last, b);
      groups.back().positions.push_back(p);
    } else {
      groups.push_back({a, b, {p}});
    }
  }
  std::string out = "--- " + path + "\n+++ " + path + "\n";
  long delta = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const Group& group = groups[g];
    std::size_t first = group.first >= kDiffContext ? group.first - kDiffContext : 0;
    std::size_t last = std::min(starts.size() - 1, group.last + kDiffContext);
    std::size_t begin = starts[first], end = last + 1 < starts.size() ? starts[last + 1] : before.size();
    std::string after;
    std::size_t at = begin;
    for (std::size_t p : group.positions) {
      after.append(before, at, p - at);
      after += replacement;
      at = p + old_len;
    }
    after.append(before, at, end - at);
    auto old_lines = split_lines(std::string_view(before).substr(begin, end - begin));
    auto new_lines = split_lines(after);
    char header[96];
    std::snprintf(header, sizeof header, "@@ -%zu,%zu +%ld,%zu @@\n", first + 1, old_lines.size(),
                  static_cast<long>(first + 1) + delta, new_lines.size());
    out += header;
    std::size_t same_front = 0;
    while (same_front < old_lines.size() && same_front < new_lines.size() && old_lines[same_front] == new_lines[same_front])
      ++same_front;
    std::size_t same_back = 0;
    while (same_back < old_lines.size() - same_front && same_back < new_lines.size() - same_front &&
           old_lines[old_lines.size() - 1 - same_back] == new_lines[new_lines.size() - 1 - same_back])
      ++same_back;
    for (std::size_t i = 0; i < same_front; ++i) diff_line(out, ' ', old_lines[i]);
    for (std::size_t i = same_front; i < old_lines.size() - same_back; ++i) diff_line(out, '-', old_lines[i]);
    for (std::size_t i = same_front; i < new_lines.size() - same_back; ++i) diff_line(out, '+', new_lines[i]);
    for (std::size_t i = old_lines.size() - same_back; i < old_lines.size(); ++i) diff_line(out, ' ', old_lines[i]);
    delta += static_cast<long>(new_lines.size()) - static_cast<long>(old_lines.size());
    if (out.size() > kMaxDiffChars) {
      std::size_t cut = out.rfind('\n', kMaxDiffChars);
      out.resize(cut == std::string::npos ? kMaxDiffChars : cut + 1);
      out += "... (diff cut; " + std::to_string(groups.size() - g - 1) + " more hunks not shown)\n";
      break;
    }
  }
  return out;
}

}  // namespace

json file_edit(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  if (!params.contains("old_string") || !params["old_string"].is_string() || params["old_string"].get_ref<const std::string&>().empty())
    throw SandboxError(codes::kInvalidArguments, "old_string is required and must not be empty");
  if (!params.contains("new_string") || !params["new_string"].is_string())
    throw SandboxError(codes::kInvalidArguments, "new_string is required (it may be empty)");
  const std::string& old_string = params["old_string"].get_ref<const std::string&>();
  const std::string& new_string = params["new_string"].get_ref<const std::string&>();
  if (old_string == new_string) throw SandboxError(codes::kInvalidArguments, "old_string and new_string are the same");
  bool replace_all = params.value("replace_all", false);

  std::string target = writable_target(path);
  struct stat st;
  os::UniqueFd fd(open_regular(target, st));
  if (static_cast<std::uint64_t>(st.st_size) > kMaxEditBytes)
    throw SandboxError(codes::kFileTooLarge, path + " is " + std::to_string(st.st_size) + " bytes; file_edit works on files up to " +
                                             std::to_string(kMaxEditBytes) + " bytes (use exec with sed for bigger ones)");
  std::string before = pread_some(fd.get(), 0, kMaxEditBytes + 1, path);
  if (!looks_text(before, false))
    throw binary_error(path, before.size(), before.substr(0, 64));

  std::vector<std::size_t> positions;
  for (std::size_t at = before.find(old_string); at != std::string::npos; at = before.find(old_string, at + old_string.size()))
    positions.push_back(at);
  if (positions.empty()) {
    std::string hint = "file_read shows the exact text; whitespace, indentation and line endings must match";
    if (before.find("\r\n") != std::string::npos && old_string.find('\n') != std::string::npos &&
        old_string.find("\r\n") == std::string::npos)
      hint = "the file has CRLF line endings; write \\r\\n in old_string";
    throw SandboxError(codes::kNoMatch, "old_string was not found in " + path + " (0 matches); " + hint);
  }
  if (positions.size() > 1 && !replace_all) {
    std::string lines;
    for (std::size_t i = 0; i < positions.size() && i < 10; ++i)
      lines += (i ? ", " : "") + std::to_string(1 + std::count(before.begin(), before.begin() + static_cast<long>(positions[i]), '\n'));
    throw SandboxError(codes::kAmbiguousMatch, "old_string occurs " + std::to_string(positions.size()) + " times in " + path +
                                              " (lines " + lines + (positions.size() > 10 ? ", ..." : "") +
                                              "); include more surrounding text to pick one, or pass replace_all: true");
  }
  std::string after;
  after.reserve(before.size() + positions.size() * new_string.size());
  std::size_t at = 0;
  for (std::size_t p : positions) {
    after.append(before, at, p - at);
    after += new_string;
    at = p + old_string.size();
  }
  after.append(before, at, std::string::npos);
  if (after.size() > max_file_bytes()) throw SandboxError(codes::kFileTooLarge, "the edited file would exceed the file size limit");
  if (access(target.c_str(), W_OK) != 0) throw file_error(errno, "cannot write", path);
  {
    BlockFileSizeSignal guard;
    replace_file(target, after, st.st_mode & 07777, params.value("sync", false), false);
  }
  close_after_reply(fd.release());
  return {{"path", target},
          {"replacements", positions.size()},
          {"size", after.size()},
          {"diff", edit_diff(target, before, positions, old_string.size(), new_string)}};
}

}  // namespace agentbox::agent
