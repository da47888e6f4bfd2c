// Snapshot reading: verification and extraction in a forked child.
//
// Why a child: libarchive's SECURE_NOABSOLUTEPATHS and SECURE_NODOTDOT judge
// an entry's own path, so extraction must run with the destination as the
// working directory, and a threaded server must never chdir. The child is
// single-threaded, enters the fresh directory, and (when the server is
// root) then drops to the sandbox's uid before it reads any entry, so even
// a libarchive bug could only write where the sandbox user may. It uses only
// async-signal-safe calls, malloc (fork-safe in glibc) and libarchive;
// nothing that logs.
//
// Like `tar --zstd -x` (tar | zstd -d), restore is a two-stage pipeline: a
// thread of the parent reads the file, hashes it and decompresses it (the
// same code verify_archive runs in-process), and the child only parses tar
// and writes files, so on two cores file creation does not wait for
// decompression. The stream travels over a socketpair: send() with
// MSG_NOSIGNAL never raises SIGPIPE in the server, and shutdown() ends the
// stream for the peer even when a process forked meanwhile by another thread
// inherited a copy of the descriptor (which would hold a pipe open).
#include "persistence/archive_local.h"
#include "persistence/archive_rules.h"
#include "persistence/child_lines.h"
#include "persistence/layers.h"
#include "persistence/sha256.h"
#include "persistence/tree_fs.h"

#include <archive.h>
#include <archive_entry.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

using local::archive_message;

constexpr std::size_t kBlock = 1 << 20;

// The archive's bytes, hashed as libarchive pulls them (the child's source,
// the stream the parent already decompressed, is not hashed).
struct Source {
  int fd = -1;
  bool hash = true;
  Sha256 sha;
  std::vector<char> buffer = std::vector<char>(kBlock);
  std::atomic<std::uint64_t> read{0};
};

la_ssize_t source_read(struct archive*, void* data, const void** out) {
  auto* s = static_cast<Source*>(data);
  for (;;) {
    ssize_t n = ::read(s->fd, s->buffer.data(), s->buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      if (s->hash) s->sha.update(s->buffer.data(), static_cast<std::size_t>(n));
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

// The rules the writer applies too (archive_rules.h); libarchive checks
// again in the child, these give the clear message.
std::string path_problem(const char* path, const std::vector<std::string>& tops) {
  return entry_path_problem(path ? path : "", tops);
}

struct ReadState {
  struct archive* in = nullptr;
  struct archive* out = nullptr;
  ~ReadState() {
    if (in) archive_read_free(in);
    if (out) archive_write_free(out);
  }
};

// Where the child writes an entry from. Files, symlinks and FIFOs are written
// by their last name from inside their parent directory, entered with
// O_NOFOLLOW opens from the destination and kept while consecutive entries
// share it; libarchive's SECURE_SYMLINKS then checks only that last name
// instead of an lstat and an open of every component for every entry (a
// quarter of restore time on a 20,000-file tree). Directories and hard links
// keep their full paths with the destination as working directory:
// libarchive fixes directories' modes and times by path at close, and a
// link names a second path, so for them it checks every component itself.
// Any failure of the walk (a symlink, a missing or non-directory component)
// also falls back to the full path, where libarchive refuses or creates.
class EntryPlace {
 public:
  explicit EntryPlace(int root) : root_(root) {}
  ~EntryPlace() { leave(); }
  EntryPlace(const EntryPlace&) = delete;
  EntryPlace& operator=(const EntryPlace&) = delete;

  // The name to give libarchive for `path`, with the working directory set.
  std::string enter(const std::string& path, bool by_parent) {
    std::size_t slash = path.rfind('/');
    if (!by_parent || slash == std::string::npos) {
      leave();
      return path;
    }
    std::string parent = path.substr(0, slash + 1);
    if (dir_ < 0 || parent != dir_path_) {
      leave();
      int fd = walk(parent);
      if (fd < 0) return path;
      if (fchdir(fd) != 0) {
        close(fd);
        fchdir(root_);
        return path;
      }
      dir_ = fd;
      dir_path_ = parent;
    }
    return path.substr(slash + 1);
  }

  // Back to the destination (before libarchive's close applies fixups).
  void leave() {
    if (dir_ < 0) return;
    fchdir(root_);
    close(dir_);
    dir_ = -1;
    dir_path_.clear();
  }

 private:
  int walk(const std::string& parent) const {
    int fd = root_;
    std::size_t start = 0, end;
    while ((end = parent.find('/', start)) != std::string::npos) {
      int next = openat(fd, parent.substr(start, end - start).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd != root_) close(fd);
      if (next < 0) return -1;
      fd = next;
      start = end + 1;
    }
    return fd == root_ ? -1 : fd;
  }

  int root_;
  int dir_ = -1;
  std::string dir_path_;  // with its trailing '/'
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

// How one archive of a chain is extracted (extract_layers): over the
// layers before it, and with the last one's list of paths applied.
struct LayerRun {
  bool over = false;            // the destination holds the earlier layers
  bool prune = false;           // the last layer of several: remove what its list does not name
  std::string expected_parent;  // "" for the first (complete) archive
  bool check_parent = true;     // false when only verifying
  int root = -1;                // the destination (the child's)
};

// The loop of libarchive's examples/untar.c: header → checks → write header →
// copy data blocks → finish entry. With out == nullptr it only reads. A
// compressed source is the archive file (digest checked here); otherwise it
// is the tar stream the parent decompressed (the parent checks the digest).
ExtractResult run(Source& source, bool compressed, struct archive* out, const ExtractOptions& options,
                  int report_fd, EntryPlace* place = nullptr, const LayerRun& layer = {}) {
  ReadState st;
  st.in = archive_read_new();
  st.out = out;
  // Only what snapshots are: zstd-compressed tar. No other decoder is reachable.
  if (compressed) archive_read_support_filter_zstd(st.in);
  archive_read_support_format_tar(st.in);
  archive_read_set_options(st.in, "hdrcharset=BINARY");
  if (archive_read_open(st.in, &source, nullptr, source_read, nullptr) != ARCHIVE_OK)
    throw ArchiveError(std::string("not a snapshot archive: ") + archive_message(st.in));
  ExtractResult result;
  std::string paths_text;
  bool has_paths = false;
  std::vector<layers::DirFix> dir_fixes;
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(st.in, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("corrupt archive: ") + archive_message(st.in));
    const char* path = archive_entry_pathname(entry);
    if (path && layers::is_meta(path)) {
      std::string text = layers::read_meta(st.in, entry);
      if (std::string_view(path) == layers::kParentEntry) {
        result.parent = std::move(text);
      } else {
        paths_text = std::move(text);
        has_paths = true;
      }
      continue;
    }
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
      if (place) {
        std::string full = path;
        path = nullptr;  // copy_pathname below frees it
        bool by_parent = !hard_link && type != AE_IFDIR;
        if (type == AE_IFDIR && !hard_link) {
          std::string dir = full;
          while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
          dir_fixes.push_back({dir, archive_entry_mode(entry), archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)});
        }
        if (layer.over && type != AE_IFDIR) {
          // A directory an earlier layer left where this entry goes.
          std::string name = place->enter(full, true);
          if (name.find('/') == std::string::npos) layers::clear_dir_in_the_way(AT_FDCWD, name);
        }
        archive_entry_copy_pathname(entry, place->enter(full, by_parent).c_str());
        rc = archive_write_header(st.out, entry);
        archive_entry_copy_pathname(entry, full.c_str());
        path = archive_entry_pathname(entry);
      } else {
        rc = archive_write_header(st.out, entry);
      }
      if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("refused: ") + archive_message(st.out));
    }
    const void* block;
    size_t size;
    la_int64_t offset;
    while ((rc = archive_read_data_block(st.in, &block, &size, &offset)) == ARCHIVE_OK) {
      if (st.out && archive_write_data_block(st.out, block, size, offset) < ARCHIVE_WARN)
        throw ArchiveError(std::string("cannot write ") + path + ": " + archive_message(st.out));
    }
    if (rc != ARCHIVE_EOF) throw ArchiveError(std::string("corrupt archive at ") + path + ": " + archive_message(st.in));
    if (st.out && archive_write_finish_entry(st.out) < ARCHIVE_WARN)
      throw ArchiveError(std::string("cannot finish ") + path + ": " + archive_message(st.out));
    if (report_fd >= 0 && std::chrono::steady_clock::now() - last > std::chrono::milliseconds(200)) {
      last = std::chrono::steady_clock::now();
      say(report_fd, "P " + std::to_string(result.files));
    }
  }
  if (layer.check_parent && result.parent != layer.expected_parent)
    throw ArchiveError(layer.expected_parent.empty()
                           ? "the archive holds only the changes since snapshot " + result.parent +
                                 ", and cannot be restored without it"
                           : "the archive holds the changes since snapshot '" + result.parent + "', not since " +
                                 layer.expected_parent + " as the catalog's chain says");
  if (layer.prune) {
    if (!has_paths) throw ArchiveError("the newest archive of the chain has no list of its paths");
    layers::prune_to(layer.root, options.allowed_tops, layers::PathList::parse(paths_text));
  }
  // Directories' final modes and mtimes are applied at close, by full path.
  if (place) place->leave();
  if (st.out && archive_write_close(st.out) != ARCHIVE_OK)
    throw ArchiveError(std::string("cannot finish extraction: ") + archive_message(st.out));
  if (st.out && layer.root >= 0) layers::fix_dirs(layer.root, std::move(dir_fixes));
  if (!compressed) return result;
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

// The parent's half of the pipeline: archive file → SHA-256 → zstd → `out`.
struct Feeder {
  Source source;
  int out = -1;
  std::string error;  // the archive itself is bad
  std::string digest;

  void run() {
    struct archive* a = archive_read_new();
    archive_read_support_filter_zstd(a);
    archive_read_support_format_raw(a);
    archive_entry* entry = nullptr;
    if (archive_read_open(a, &source, nullptr, source_read, nullptr) != ARCHIVE_OK ||
        archive_filter_code(a, 0) != ARCHIVE_FILTER_ZSTD || archive_read_next_header(a, &entry) != ARCHIVE_OK) {
      const char* e = archive_error_string(a);
      error = std::string("not a snapshot archive: ") + (e ? e : "not zstd-compressed");
    } else {
      const void* block;
      size_t size;
      la_int64_t offset;
      int rc = ARCHIVE_OK;
      bool sending = true;
      while (sending && (rc = archive_read_data_block(a, &block, &size, &offset)) == ARCHIVE_OK)
        sending = send_all(static_cast<const char*>(block), size);
      if (rc < ARCHIVE_EOF) error = std::string("corrupt archive: ") + archive_message(a);
    }
    archive_read_free(a);
    shutdown(out, SHUT_WR);  // the child sees the end of the stream
    drain(source);
    digest = source.sha.finish();
  }

  // False once the child has stopped reading (it finished or failed).
  bool send_all(const char* p, std::size_t left) {
    while (left > 0) {
      ssize_t n = ::send(out, p, left, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return true;
  }
};

[[noreturn]] void child_main(const fs::path& dest, int stream_fd, int report_fd, const ExtractOptions& options,
                             pid_t parent, LayerRun layer) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    // Entered before dropping to the sandbox user, who need not be able to
    // walk dest's parents (the state directory may sit under a 0700 /root).
    int dest_fd = open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dest_fd < 0 || fchdir(dest_fd) != 0)
      throw ArchiveError("cannot enter " + dest.string() + ": " + std::strerror(errno));
    close(dest_fd);
    if (options.owner && geteuid() == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(options.owner->second) != 0 || setuid(options.owner->first) != 0)
        throw ArchiveError(std::string("cannot drop to the sandbox user: ") + std::strerror(errno));
      // Changing the effective uid clears the parent-death signal (prctl(2)):
      // set it again, or a child outlives a killed helper and keeps writing.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    if (getppid() != parent) _exit(126);
    Source source;
    source.fd = stream_fd;
    source.hash = false;
    // No ARCHIVE_EXTRACT_UNLINK: with it libarchive would quietly replace a
    // symlink met on an entry's path; without it the entry is refused.
    struct archive* out = archive_write_disk_new();
    archive_write_disk_set_options(
        out, ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
                 ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM);
    int root = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) throw ArchiveError("cannot open " + dest.string() + ": " + std::strerror(errno));
    EntryPlace place(root);
    layer.root = root;
    if (layer.over) layers::make_dirs_writable(root, options.allowed_tops);
    ExtractResult r = run(source, false, out, options, report_fd, &place, layer);
    say(report_fd, "OK " + std::to_string(r.files) + " " + std::to_string(r.bytes));
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

namespace local {

ExtractResult verify_archive(const fs::path& archive) {
  Source source;
  source.fd = open_archive(archive);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{source.fd};
  ExtractOptions options;
  LayerRun any;
  any.check_parent = false;
  return run(source, true, nullptr, options, -1, nullptr, any);
}

namespace {

ExtractResult extract_one(const fs::path& archive, const fs::path& dest, const ExtractOptions& options,
                          const LayerRun& layer) {
  struct stat st;
  if (::stat(archive.c_str(), &st) != 0) {
    if (layer.over) remove_tree(dest);
    throw ArchiveError("cannot read " + archive.string() + ": " + std::strerror(errno));
  }
  std::uint64_t total = static_cast<std::uint64_t>(st.st_size);
  if (!layer.over && mkdir(dest.c_str(), 0700) != 0)
    throw ArchiveError("cannot create " + dest.string() + ": " + std::strerror(errno));
  auto fail = [&](const std::string& message) -> ArchiveError {
    remove_tree(dest);  // written by the sandbox uid: by descriptor (tree_fs.h)
    return ArchiveError(message);
  };
  if (options.owner && geteuid() == 0 && chown(dest.c_str(), options.owner->first, options.owner->second) != 0)
    throw fail("cannot hand " + dest.string() + " to the sandbox user: " + std::strerror(errno));
  Feeder feeder;
  try {
    feeder.source.fd = open_archive(archive);
  } catch (const ArchiveError& e) {
    throw fail(e.what());
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } archive_closer{feeder.source.fd};
  int pipe_fds[2], stream_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw fail(std::string("pipe: ") + std::strerror(errno));
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, stream_fds) != 0) {
    int err = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    throw fail(std::string("socketpair: ") + std::strerror(err));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {pipe_fds[0], pipe_fds[1], stream_fds[0], stream_fds[1]}) close(fd);
    throw fail(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    close(stream_fds[0]);
    close(feeder.source.fd);
    child_main(dest, stream_fds[1], pipe_fds[1], options, parent, layer);
  }
  close(pipe_fds[1]);
  close(stream_fds[1]);
  feeder.out = stream_fds[0];
  std::thread feeding([&feeder] { feeder.run(); });
  int status = 0;
  auto stop = [&] {
    close(pipe_fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    // The child is gone: a feeder still sending gets EPIPE and only hashes the rest.
    shutdown(feeder.out, SHUT_RDWR);
    feeding.join();
    close(feeder.out);
  };
  std::string final_line;
  try {
    auto progress = [&](const char* text) {
      unsigned long long files = 0;
      std::sscanf(text, "%llu", &files);
      if (options.progress) options.progress({feeder.source.read.load(), files, total});
    };
    final_line = read_child_lines(pipe_fds[0], progress, [](const std::string&) { return true; });
  } catch (...) {  // a progress callback threw: stop the child first
    kill(pid, SIGKILL);
    stop();
    remove_tree(dest);  // written by the sandbox uid: by descriptor (tree_fs.h)
    throw;
  }
  stop();
  if (!feeder.error.empty()) throw fail("cannot restore " + archive.filename().string() + ": " + feeder.error);
  if (final_line.rfind("OK ", 0) != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = final_line.rfind("ERR ", 0) == 0 ? final_line.substr(4)
                      : WIFSIGNALED(status) ? "the extracting process died of signal " + std::to_string(WTERMSIG(status))
                                            : "the extracting process failed";
    throw fail("cannot restore " + archive.filename().string() + ": " + why);
  }
  if (!options.expected_digest.empty() && feeder.digest != options.expected_digest)
    throw fail("digest mismatch: the catalog records " + options.expected_digest + " but the file has " +
               feeder.digest + " (the archive was changed or damaged)");
  ExtractResult result;
  unsigned long long files = 0, bytes = 0;
  std::sscanf(final_line.c_str() + 3, "%llu %llu", &files, &bytes);
  result.files = files;
  result.bytes = bytes;
  result.digest = feeder.digest;
  if (options.progress) options.progress({total, result.files, total});
  return result;
}

}  // namespace

ExtractResult extract_layers(const std::vector<Layer>& chain, const fs::path& dest, const ExtractOptions& options) {
  if (chain.empty()) throw ArchiveError("no archive to restore");
  ExtractResult total;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    ExtractOptions one = options;
    one.expected_digest = chain[i].digest;
    LayerRun layer;
    layer.over = i > 0;
    layer.prune = i + 1 == chain.size() && chain.size() > 1;
    layer.expected_parent = i > 0 ? chain[i - 1].id : "";
    ExtractResult r = extract_one(chain[i].archive, dest, one, layer);
    total.files = r.files;
    total.bytes += r.bytes;
    total.digest = r.digest;
  }
  if (!options.baseline_out.empty()) {
    try {
      layers::write_tree_baseline(dest, options.allowed_tops, options.baseline_out, chain.back().id);
    } catch (...) {
      remove_tree(dest);
      throw;
    }
  }
  return total;
}

}  // namespace local

}  // namespace agentbox::persistence
