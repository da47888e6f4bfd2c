// Snapshot reading: verification and extraction in a forked child.
//
// Why a child: libarchive's SECURE_NOABSOLUTEPATHS and SECURE_NODOTDOT judge
// an entry's own path, so extraction must run with the destination as the
// working directory, and a threaded server must never chdir. The child is
// single-threaded, chdirs into the fresh directory, and (when the server is
// root) drops to the sandbox's uid first, so even a libarchive bug could
// only write where the sandbox user may. It uses only async-signal-safe
// calls, malloc (fork-safe in glibc) and libarchive; nothing that logs.
#include "persistence/archive.h"
#include "persistence/sha256.h"

#include <archive.h>
#include <archive_entry.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBlock = 1 << 20;
constexpr std::size_t kMaxPath = 4096;

// The archive's bytes, hashed as libarchive pulls them.
struct Source {
  int fd = -1;
  Sha256 sha;
  std::vector<char> buffer = std::vector<char>(kBlock);
  std::uint64_t read = 0;
};

la_ssize_t source_read(struct archive*, void* data, const void** out) {
  auto* s = static_cast<Source*>(data);
  for (;;) {
    ssize_t n = ::read(s->fd, s->buffer.data(), s->buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      s->sha.update(s->buffer.data(), static_cast<std::size_t>(n));
      s->read += static_cast<std::uint64_t>(n);
    }
    *out = s->buffer.data();
    return n;
  }
}

// What the last bytes libarchive did not need still count in the digest.
void drain(Source& s) {
  const void* ignored;
  while (source_read(nullptr, &s, &ignored) > 0) {
  }
}

// An entry path is acceptable when it is relative, has no "." or ".."
// component and starts with one of the expected top-level names. libarchive
// checks again in the child; this check gives the clear message.
std::string path_problem(const char* path, const std::vector<std::string>& tops) {
  if (!path || !*path) return "an entry has no name";
  std::string p(path);
  if (p.size() > kMaxPath) return "an entry name is longer than " + std::to_string(kMaxPath) + " bytes";
  if (p[0] == '/') return "entry '" + p + "' has an absolute path";
  std::size_t start = 0;
  bool first = true;
  while (start <= p.size()) {
    std::size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string part = p.substr(start, end - start);
    if (part == "..") return "entry '" + p + "' climbs out with '..'";
    if (first) {
      bool known = false;
      for (const auto& t : tops) known |= part == t;
      if (!known) return "entry '" + p + "' is outside the expected directories";
      first = false;
    }
    start = end + 1;
  }
  return "";
}

struct ReadState {
  struct archive* in = nullptr;
  struct archive* out = nullptr;
  ~ReadState() {
    if (in) archive_read_free(in);
    if (out) archive_write_free(out);
  }
};

// Reports go to the parent as lines: "P <archive bytes> <files>", then
// "OK <files> <bytes> <digest>" or "ERR <message>".
void say(int fd, const std::string& line) {
  std::string l = line + "\n";
  const char* p = l.data();
  std::size_t left = l.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// The loop of libarchive's examples/untar.c: header → checks → write header →
// copy data blocks → finish entry. With out == nullptr it only reads.
ExtractResult run(Source& source, struct archive* out, const ExtractOptions& options, int report_fd) {
  ReadState st;
  st.in = archive_read_new();
  st.out = out;
  // Only what snapshots are: zstd-compressed tar. No other decoder is reachable.
  archive_read_support_filter_zstd(st.in);
  archive_read_support_format_tar(st.in);
  archive_read_set_options(st.in, "hdrcharset=BINARY");
  if (archive_read_open(st.in, &source, nullptr, source_read, nullptr) != ARCHIVE_OK)
    throw ArchiveError(std::string("not a snapshot archive: ") + archive_error_string(st.in));
  ExtractResult result;
  std::vector<char> zero;
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(st.in, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("corrupt archive: ") + archive_error_string(st.in));
    const char* path = archive_entry_pathname(entry);
    if (auto problem = path_problem(path, options.allowed_tops); !problem.empty()) throw ArchiveError(problem);
    if (const char* link = archive_entry_hardlink(entry)) {
      if (auto problem = path_problem(link, options.allowed_tops); !problem.empty())
        throw ArchiveError("hard link target: " + problem);
    }
    auto type = archive_entry_filetype(entry);
    bool hard_link = archive_entry_hardlink(entry) != nullptr;
    if (!hard_link && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO)
      throw ArchiveError(std::string("entry '") + path + "' is a device or socket, which snapshots never hold");
    archive_entry_set_uid(entry, 0);
    archive_entry_set_gid(entry, 0);
    if (archive_entry_size(entry) > 0) result.bytes += static_cast<std::uint64_t>(archive_entry_size(entry));
    if (result.bytes > options.max_bytes)
      throw ArchiveError("the archive expands beyond " + std::to_string(options.max_bytes) + " bytes");
    ++result.files;
    if (st.out) {
      rc = archive_write_header(st.out, entry);
      if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("refused: ") + archive_error_string(st.out));
    }
    const void* block;
    size_t size;
    la_int64_t offset;
    while ((rc = archive_read_data_block(st.in, &block, &size, &offset)) == ARCHIVE_OK) {
      if (st.out && archive_write_data_block(st.out, block, size, offset) < ARCHIVE_WARN)
        throw ArchiveError(std::string("cannot write ") + path + ": " + archive_error_string(st.out));
    }
    if (rc != ARCHIVE_EOF) throw ArchiveError(std::string("corrupt archive at ") + path + ": " + archive_error_string(st.in));
    if (st.out && archive_write_finish_entry(st.out) < ARCHIVE_WARN)
      throw ArchiveError(std::string("cannot finish ") + path + ": " + archive_error_string(st.out));
    if (report_fd >= 0 && std::chrono::steady_clock::now() - last > std::chrono::milliseconds(200)) {
      last = std::chrono::steady_clock::now();
      say(report_fd, "P " + std::to_string(source.read) + " " + std::to_string(result.files));
    }
  }
  // Directories' final modes and mtimes are applied at close.
  if (st.out && archive_write_close(st.out) != ARCHIVE_OK)
    throw ArchiveError(std::string("cannot finish extraction: ") + archive_error_string(st.out));
  drain(source);
  result.digest = source.sha.finish();
  if (!options.expected_digest.empty() && result.digest != options.expected_digest)
    throw ArchiveError("digest mismatch: the catalog records " + options.expected_digest + " but the file has " +
                       result.digest + " (the archive was changed or damaged)");
  return result;
}

int open_archive(const fs::path& archive) {
  int fd = open(archive.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ArchiveError("cannot open " + archive.string() + ": " + std::strerror(errno));
  return fd;
}

[[noreturn]] void child_main(const fs::path& dest, int archive_fd, int report_fd, const ExtractOptions& options) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    if (options.owner && geteuid() == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(options.owner->second) != 0 || setuid(options.owner->first) != 0)
        throw ArchiveError(std::string("cannot drop to the sandbox user: ") + std::strerror(errno));
    }
    if (chdir(dest.c_str()) != 0) throw ArchiveError("cannot enter " + dest.string() + ": " + std::strerror(errno));
    Source source;
    source.fd = archive_fd;
    // No ARCHIVE_EXTRACT_UNLINK: with it libarchive would quietly replace a
    // symlink met on an entry's path; without it the entry is refused.
    struct archive* out = archive_write_disk_new();
    archive_write_disk_set_options(
        out, ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
                 ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM);
    ExtractResult r = run(source, out, options, report_fd);
    say(report_fd, "OK " + std::to_string(r.files) + " " + std::to_string(r.bytes) + " " + r.digest);
    _exit(0);
  } catch (const std::exception& e) {
    std::string message = e.what();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    say(report_fd, "ERR " + message);
  }
  _exit(1);
}

}  // namespace

ExtractResult verify_archive(const fs::path& archive) {
  Source source;
  source.fd = open_archive(archive);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{source.fd};
  ExtractOptions options;
  return run(source, nullptr, options, -1);
}

ExtractResult extract_archive(const fs::path& archive, const fs::path& dest, const ExtractOptions& options) {
  struct stat st;
  if (::stat(archive.c_str(), &st) != 0)
    throw ArchiveError("cannot read " + archive.string() + ": " + std::strerror(errno));
  std::uint64_t total = static_cast<std::uint64_t>(st.st_size);
  if (mkdir(dest.c_str(), 0700) != 0)
    throw ArchiveError("cannot create " + dest.string() + ": " + std::strerror(errno));
  auto fail = [&](const std::string& message) -> ArchiveError {
    std::error_code ec;
    fs::remove_all(dest, ec);
    return ArchiveError(message);
  };
  if (options.owner && geteuid() == 0 && chown(dest.c_str(), options.owner->first, options.owner->second) != 0)
    throw fail("cannot hand " + dest.string() + " to the sandbox user: " + std::strerror(errno));
  int archive_fd = -1;
  try {
    archive_fd = open_archive(archive);
  } catch (const ArchiveError& e) {
    throw fail(e.what());
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(archive_fd);
    throw fail(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(archive_fd);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    throw fail(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    child_main(dest, archive_fd, pipe_fds[1], options);
  }
  close(archive_fd);
  close(pipe_fds[1]);
  std::string pending, final_line;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.rfind("P ", 0) == 0 && options.progress) {
        unsigned long long bytes = 0, files = 0;
        std::sscanf(line.c_str() + 2, "%llu %llu", &bytes, &files);
        options.progress({bytes, files, total});
      } else if (line.rfind("P ", 0) != 0) {
        final_line = line;
      }
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (final_line.rfind("OK ", 0) != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = final_line.rfind("ERR ", 0) == 0 ? final_line.substr(4)
                      : WIFSIGNALED(status) ? "the extracting process died of signal " + std::to_string(WTERMSIG(status))
                                            : "the extracting process failed";
    throw fail("cannot restore " + archive.filename().string() + ": " + why);
  }
  ExtractResult result;
  char digest[160] = {0};
  unsigned long long files = 0, bytes = 0;
  std::sscanf(final_line.c_str() + 3, "%llu %llu %150s", &files, &bytes, digest);
  result.files = files;
  result.bytes = bytes;
  result.digest = digest;
  if (options.progress) options.progress({total, result.files, total});
  return result;
}

}  // namespace agentbox::persistence
