// file.read (files.h): a page of a file, as text or base64.
#include "agent/files.h"

#include "agent/base64.h"
#include "agent/file_io.h"
#include "agent/file_paths.h"
#include "agent/output_buffer.h"
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

// Up to n bytes from offset. The buffer starts at what the file holds (n is
// often a 1 MiB page limit over a 100-byte file: zero-filling and faulting in
// a megabyte per read cost more than the read) and grows for files whose
// size says nothing, such as those in /proc.
std::string pread_some(int fd, std::uint64_t offset, std::size_t n, const std::string& path) {
  struct stat st;
  std::uint64_t left = fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) > offset
                           ? static_cast<std::uint64_t>(st.st_size) - offset
                           : 0;
  std::string data(static_cast<std::size_t>(std::min<std::uint64_t>(n, std::max<std::uint64_t>(left + 1, 4096))), '\0');
  std::size_t got = 0;
  while (got < n) {
    if (got == data.size()) data.resize(std::min(n, data.size() * 2));
    ssize_t r = pread(fd, data.data() + got, data.size() - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw file_error(errno, "cannot read", path);
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  data.resize(got);
  return data;
}

// Opens a regular file for reading; directories and devices are refused with
// a code that says what they are.
int open_regular(const std::string& path, struct stat& st) {
  // O_NONBLOCK: opening a FIFO must not hang the call.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw file_error(errno, "cannot open", path);
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    throw file_error(err, "cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    throw SandboxError(codes::kIsDirectory, path + " is a directory; use file_list to see what it holds");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    throw SandboxError(codes::kInvalidArguments, path + " is not a regular file (a device, FIFO or socket); read it with exec");
  }
  return fd;
}

SandboxError binary_error(const std::string& path, std::uint64_t size, std::string_view head) {
  return SandboxError(codes::kBinaryFile, path + " is not UTF-8 text (" + guess_mime(path, head, false) + ", " +
                                              std::to_string(size) + " bytes); read it with encoding \"base64\"");
}

namespace {

constexpr std::size_t kScanChunk = 64 * 1024;

// Byte offset where 1-based line `line` starts, scanning from `from`
// (counting `line - 1` newlines); the end of the file if it has fewer lines.
std::uint64_t skip_lines(int fd, std::uint64_t from, std::int64_t lines, const std::string& path) {
  std::uint64_t pos = from;
  while (lines > 0) {
    std::string chunk = pread_some(fd, pos, kScanChunk, path);
    if (chunk.empty()) return pos;
    std::size_t i = 0;
    while (lines > 0) {
      std::size_t nl = chunk.find('\n', i);
      if (nl == std::string::npos) break;
      i = nl + 1;
      --lines;
    }
    pos += lines > 0 ? chunk.size() : i;
  }
  return pos;
}

std::int64_t optional_int(const json& params, const char* name, std::int64_t min) {
  std::int64_t v = param_int(params, name, min);
  if (v < min) throw SandboxError(codes::kInvalidArguments, std::string(name) + " must be at least " + std::to_string(min));
  return v;
}

bool has(const json& params, const char* name) { return params.contains(name) && !params[name].is_null(); }

struct TextPage {
  std::size_t bytes = 0;  // of the page, whole characters only
  bool incomplete_at_eof = false;
};

// Bytes of a character cut off by the end of page (0 if none).
std::size_t incomplete_tail(std::string_view page) {
  for (std::size_t back = 1; back <= std::min<std::size_t>(3, page.size()); ++back) {
    auto c = static_cast<unsigned char>(page[page.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? back : 0;
  }
  return 0;
}

// How much of page to return: whole characters starting before `limit`
// bytes, within the inline cap as the result shows them (text and
// structuredContent, output_buffer.h) and its line count.
TextPage cut_text(std::string_view page, std::size_t limit, std::size_t budget, bool at_eof) {
  TextPage out;
  std::size_t end = std::min(page.size(), limit);
  while (end < page.size() && (static_cast<unsigned char>(page[end]) & 0xC0) == 0x80) ++end;
  std::string_view range = page.substr(0, end);
  std::size_t partial = incomplete_tail(range);
  range.remove_suffix(partial);
  out.bytes = fit_prefix(range, budget, kMaxShownLines);
  out.incomplete_at_eof = at_eof && partial > 0 && out.bytes == range.size();
  return out;
}

}  // namespace

json file_read(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  std::string encoding = param_string(params, "encoding", "utf-8");
  if (encoding != "utf-8" && encoding != "base64")
    throw SandboxError(codes::kInvalidArguments, "encoding must be \"utf-8\" or \"base64\"");
  bool text = encoding == "utf-8";
  bool by_lines = has(params, "start_line") || has(params, "line_count");
  if (by_lines && !text) throw SandboxError(codes::kInvalidArguments, "start_line/line_count work with encoding utf-8 only");
  if (by_lines && has(params, "offset"))
    throw SandboxError(codes::kInvalidArguments, "give either offset or start_line, not both");

  struct stat st;
  os::UniqueFd fd(open_regular(path, st));
  std::uint64_t offset = static_cast<std::uint64_t>(optional_int(params, "offset", 0));
  bool explicit_length = has(params, "length");
  // A page is shown twice, in the text and in structuredContent, and both
  // together stay within the inline cap whatever `length` asks for: a text
  // byte costs at least 2 (cut_text counts the rest), a base64 character 2.
  std::size_t page_cap = text ? env.inline_chars / 2 : env.inline_chars / 8 * 3;
  std::size_t limit = explicit_length ? std::min<std::uint64_t>(optional_int(params, "length", 0), page_cap) : page_cap;
  std::int64_t start_line = 0;
  if (by_lines) {
    start_line = optional_int(params, "start_line", 1);
    offset = skip_lines(fd.get(), 0, start_line - 1, path);
    if (has(params, "line_count")) {
      std::uint64_t end = skip_lines(fd.get(), offset, optional_int(params, "line_count", 1), path);
      limit = std::min<std::uint64_t>(limit, end - offset);
    }
  }

  json result = {{"path", path}, {"encoding", encoding}};
  std::string head = pread_some(fd.get(), 0, 64, path);
  if (text) {
    // A page that starts inside a UTF-8 sequence backs up to its first byte.
    std::size_t back = static_cast<std::size_t>(std::min<std::uint64_t>(offset, 3));
    std::size_t wanted = back + limit + 4;  // 4: room to finish a character that starts before the limit
    std::string data = pread_some(fd.get(), offset - back, wanted, path);
    bool at_eof = data.size() < wanted;
    std::size_t start = back;
    while (start > 0 && start < data.size() && (static_cast<unsigned char>(data[start]) & 0xC0) == 0x80) --start;
    if (start < data.size() && (static_cast<unsigned char>(data[start]) & 0xC0) == 0x80) start = back;
    std::string_view page = std::string_view(data).substr(std::min(start, data.size()));
    limit += back - start;
    if (!looks_text(page)) throw binary_error(path, static_cast<std::uint64_t>(st.st_size), head);
    TextPage cut = cut_text(page, limit, env.inline_chars, at_eof);
    if (cut.incomplete_at_eof) throw binary_error(path, static_cast<std::uint64_t>(st.st_size), head);
    offset = offset - back + start;
    result["content"] = std::string(page.substr(0, cut.bytes));
    result["bytes"] = cut.bytes;
    result["truncated"] = cut.bytes < page.size();
    if (by_lines) {
      const std::string& content = result["content"].get_ref<const std::string&>();
      auto newlines = std::count(content.begin(), content.end(), '\n');
      bool ends_line = !content.empty() && content.back() == '\n';
      result["start_line"] = start_line;
      result["end_line"] = start_line + newlines - (ends_line || content.empty() ? 1 : 0);
    }
  } else {
    std::string data = pread_some(fd.get(), offset, limit + 1, path);
    bool more = data.size() > limit;
    if (more) data.resize(limit);
    result["content"] = base64_encode(data);
    result["bytes"] = data.size();
    result["truncated"] = more;
  }
  std::uint64_t bytes = result["bytes"].get<std::uint64_t>();
  // /proc files report size 0 but have content.
  result["size"] = std::max<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), offset + bytes);
  result["offset"] = offset;
  result["next_offset"] = offset + bytes;
  result["mime_type"] = guess_mime(path, head, looks_text(head));
  return result;
}

}  // namespace agentbox::agent
