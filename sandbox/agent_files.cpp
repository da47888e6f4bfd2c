// file.read, file.write, file.edit and the method table (agent_files.h).
#include "sandbox/agent_files.h"

#include "os/unique_fd.h"
#include "sandbox/base64.h"
#include "sandbox/file_paths.h"
#include "sandbox/output_buffer.h"

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

namespace agentbox::sandbox {

namespace {

constexpr std::size_t kScanChunk = 64 * 1024;

// RLIMIT_FSIZE raises SIGXFSZ, whose default action would end the agent.
// Blocked in the writing thread, the write fails with EFBIG instead; the
// pending signal is consumed before the mask is restored, since a pooled
// thread must not carry it into a command it spawns.
class BlockFileSizeSignal {
 public:
  BlockFileSizeSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockFileSizeSignal() {
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_, old_;
};

// Read at each call: a command running as the agent's user may lower it
// (prlimit --pid 1).
std::uint64_t max_file_bytes() {
  rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) return limit.rlim_cur;
  return UINT64_MAX;
}

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

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw file_error(errno, "cannot write", path);
    data.remove_prefix(static_cast<std::size_t>(n));
  }
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

namespace {

void fsync_directory(const std::string& dir) {
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

// 0666 less the agent's umask (set once at its start), read from
// /proc/self/status: umask(2) reads only by setting, and a change, even for
// an instant, would apply to files other threads create and to commands they
// spawn meanwhile.
mode_t default_file_mode() {
  static const mode_t mode = [] {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    std::string_view status(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    std::size_t at = status.find("\nUmask:");
    if (at == std::string_view::npos) return static_cast<mode_t>(0644);
    return static_cast<mode_t>(0666 & ~std::strtoul(buf + at + 7, nullptr, 8));
  }();
  return mode;
}

// A new file, written unnamed (O_TMPFILE) in its directory and linked in
// under its name once complete: a reader sees no file or all of it, and
// linkat fails with EEXIST if something took the name meanwhile. One
// directory entry instead of a temporary name plus a rename (~25 instead of
// ~40 µs here). False when this filesystem or sandbox cannot (no O_TMPFILE,
// no /proc) or when a file appeared and may be replaced: the caller then
// renames a named temporary file.
bool link_new_file(const std::string& dir, const std::string& target, std::string_view data, bool sync,
                   bool no_replace) {
  os::UniqueFd fd(open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666));  // the umask applies, as for any new file
  if (fd.get() < 0) return false;
  write_all(fd.get(), data, target);
  if (sync && fsync(fd.get()) != 0) throw file_error(errno, "cannot flush", target);
  std::string self = "/proc/self/fd/" + std::to_string(fd.get());
  if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, target.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    if (errno == EEXIST && no_replace) throw file_error(errno, "cannot create", target);
    return false;
  }
  if (sync) fsync_directory(dir);
  return true;
}

// Writes data to a new temporary file next to target and renames it into
// place: a reader sees the old file or the new one, never a part. With
// no_replace the rename fails if target exists (file_write mode "create").
// `mode` is the replaced file's; none for a new file. A file that was not
// there is linked in from an unnamed file instead (link_new_file).
// A plain rename over the old file, not renameat2(RENAME_EXCHANGE): ext4's
// auto_da_alloc starts writeback of a file renamed over another, which is
// what keeps the old or the new content after a crash without an fsync. It
// costs ~40 µs per overwrite on this host's virtual disk (docs/files.md,
// "Durability"); the exchange would skip it and lose that guarantee.
void replace_file(const std::string& target, std::string_view data, std::optional<mode_t> mode, bool sync,
                  bool no_replace) {
  std::string dir = target.substr(0, target.rfind('/'));
  if (dir.empty()) dir = "/";
  if (!mode && link_new_file(dir, target, data, sync, no_replace)) return;
  std::string temp = (dir == "/" ? "" : dir) + "/.agentbox-write-XXXXXX";
  int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) throw file_error(errno, "cannot create a temporary file in", dir);
  try {
    write_all(fd, data, target);
    if (fchmod(fd, mode ? *mode : default_file_mode()) != 0) throw file_error(errno, "cannot set the mode of", target);
    if (sync && fsync(fd) != 0) throw file_error(errno, "cannot flush", target);
    if (close(fd) != 0) {
      fd = -1;
      throw file_error(errno, "cannot write", target);
    }
    fd = -1;
    int rc = no_replace ? renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE)
                        : rename(temp.c_str(), target.c_str());
    if (rc != 0) throw file_error(errno, no_replace ? "cannot create" : "cannot replace", target);
  } catch (...) {
    if (fd >= 0) close(fd);
    unlink(temp.c_str());
    throw;
  }
  if (sync) fsync_directory(dir);
}

void make_parents(const std::string& target) {
  std::size_t slash = 0;
  while ((slash = target.find('/', slash + 1)) != std::string::npos) {
    std::string dir = target.substr(0, slash);
    if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) throw file_error(errno, "cannot create directory", dir);
  }
}

// See close_after_reply in agent_files.h. Per thread: the thread that served
// a request sends its reply and then hands what the request left here to
// the closer.
thread_local std::vector<int> t_close_after_reply;
constexpr std::size_t kMaxHeldFiles = 16;

// Closes descriptors on a thread of its own, started on first use and never
// stopped (the process's exit closes what is left). At most kMaxPending wait:
// beyond that the caller closes its own, so a disk slower than the writes
// holds up the writes instead of piling up descriptors. (Waking it per file
// measured better than batching or SCHED_IDLE, docs/files.md "Writing".)
class Closer {
 public:
  static Closer& instance() {
    static Closer* closer = new Closer;  // never destroyed: its thread may still run at exit
    return *closer;
  }

  void close_later(std::vector<int>& fds) {
    {
      std::lock_guard lock(mutex_);
      if (!started_) {
        // The sandbox's process limit may be used up by its commands: then
        // the writer closes its own, as when the queue is full.
        try {
          std::thread([this] { run(); }).detach();
          started_ = true;
        } catch (const std::system_error&) {
        }
      }
      if (started_ && pending_.size() + fds.size() <= kMaxPending) {
        pending_.insert(pending_.end(), fds.begin(), fds.end());
        fds.clear();
      }
    }
    if (fds.empty()) {
      ready_.notify_one();
      return;
    }
    for (int fd : fds) close(fd);
    fds.clear();
  }

 private:
  static constexpr std::size_t kMaxPending = 64;

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return !pending_.empty(); });
      std::vector<int> batch;
      batch.swap(pending_);
      lock.unlock();
      for (int fd : batch) close(fd);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<int> pending_;
  bool started_ = false;
};

}  // namespace

void close_after_reply(int fd) {
  if (fd < 0) return;
  if (t_close_after_reply.size() >= kMaxHeldFiles) {
    close(fd);
    return;
  }
  t_close_after_reply.push_back(fd);
}

void close_files_after_reply() {
  if (!t_close_after_reply.empty()) Closer::instance().close_later(t_close_after_reply);
}

json file_write(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  if (!params.contains("content") || !params["content"].is_string())
    throw SandboxError(codes::kInvalidArguments, "content is required and must be a string");
  std::string encoding = param_string(params, "encoding", "utf-8");
  std::string mode = param_string(params, "mode", "overwrite");
  if (mode != "overwrite" && mode != "append" && mode != "create")
    throw SandboxError(codes::kInvalidArguments, "mode must be \"overwrite\", \"append\" or \"create\"");
  std::string decoded;
  const std::string* data = &params["content"].get_ref<const std::string&>();
  if (encoding == "base64") {
    auto bytes = base64_decode(*data);
    if (!bytes) throw SandboxError(codes::kInvalidArguments, "content is not valid base64");
    decoded = std::move(*bytes);
    data = &decoded;
  } else if (encoding != "utf-8") {
    throw SandboxError(codes::kInvalidArguments, "encoding must be \"utf-8\" or \"base64\"");
  }
  bool sync = params.value("sync", false);

  std::string target = writable_target(path);
  // Held (O_PATH: no access needed, a FIFO does not block) until the reply
  // is sent, so that a replaced file's blocks are freed after it.
  os::UniqueFd old(open(target.c_str(), O_PATH | O_CLOEXEC));
  struct stat st;
  // Any failure but ENOENT (EMFILE, say) is asked again without a
  // descriptor, as before: an existing file must not pass for a new one.
  bool exists = old.get() >= 0 ? fstat(old.get(), &st) == 0 : errno != ENOENT && stat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw SandboxError(codes::kIsDirectory, path + " is a directory");
  if (exists && mode == "create")
    throw SandboxError(codes::kFileExists, path + " already exists; use mode \"overwrite\" to replace it");
  if (exists && !S_ISREG(st.st_mode))
    throw SandboxError(codes::kInvalidArguments, path + " is not a regular file (a device, FIFO or socket)");
  // An atomic replace would succeed on a read-only file (only the directory
  // is written); refuse it as `echo > file` would.
  if (exists && access(target.c_str(), W_OK) != 0) throw file_error(errno, "cannot write", path);
  std::uint64_t final_size = data->size() + (mode == "append" && exists ? static_cast<std::uint64_t>(st.st_size) : 0);
  std::uint64_t max = max_file_bytes();
  if (final_size > max)
    throw SandboxError(codes::kFileTooLarge, path + " would be " + std::to_string(final_size) +
                                             " bytes; the sandbox's file size limit is " + std::to_string(max));
  if (!exists) {
    struct stat parent;
    if (stat(target.substr(0, target.rfind('/')).c_str(), &parent) != 0) make_parents(target);
  }

  if (mode == "append") {
    // Only an append can pass the size limit: the file may have grown since
    // the stat. A new file holds just `data`, checked above (should a command
    // lower the limit in between, the write fails with EFBIG: SIGXFSZ's
    // default action does not apply to the agent, its PID namespace's init
    // under bwrap --as-pid-1).
    BlockFileSizeSignal guard;
    // O_NONBLOCK: a FIFO swapped in since the stat must not hang the agent.
    os::UniqueFd fd(open(target.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666));
    if (fd.get() < 0) throw file_error(errno, "cannot open", path);
    write_all(fd.get(), *data, path);
    if (sync && fsync(fd.get()) != 0) throw file_error(errno, "cannot flush", path);
  } else {
    replace_file(target, *data, exists ? std::optional<mode_t>(st.st_mode & 07777) : std::nullopt, sync,
                 mode == "create");
    close_after_reply(old.release());
  }
  return {{"path", target}, {"bytes_written", data->size()}, {"size", final_size}, {"created", !exists}};
}

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

void register_file_methods(MethodTable& table, SessionResolver resolve, const AgentConfig& config) {
  auto env = [resolve = std::move(resolve), &config](const json& params) {
    FileEnv e;
    e.cwd = resolve(param_string(params, "session", "default")).cwd;
    e.inline_chars = config.inline_output_chars;
    return e;
  };
  // Every file method's error names the session's cwd when a relative path led there.
  auto bind = [&table, env](const char* method, std::function<json(AgentRequest&, const FileEnv&)> op) {
    table[method] = [env, op](AgentRequest& r) {
      FileEnv e = env(r.params());
      try {
        return op(r, e);
      } catch (const SandboxError& error) {
        throw with_cwd_note(error, r.params(), e.cwd);
      }
    };
  };
  using Op = json (*)(const json&, const FileEnv&);
  const std::pair<const char*, Op> ops[] = {{"file.read", file_read},   {"file.write", file_write},
                                            {"file.edit", file_edit},   {"file.stat", file_stat},
                                            {"file.mkdir", file_mkdir}, {"file.delete", file_delete},
                                            {"file.move", file_move},   {"file.list", file_list}};
  for (const auto& [method, op] : ops)
    bind(method, [op = op](AgentRequest& r, const FileEnv& e) { return op(r.params(), e); });
  bind("file.search", file_search);
}

}  // namespace agentbox::sandbox
