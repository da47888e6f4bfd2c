// Snapshot writing: tree walk → pax entries → zstd → temporary file.
#include "os/errno_text.h"
#include "persistence/archive_local.h"
#include "persistence/archive_out.h"
#include "persistence/archive_rules.h"
#include "persistence/child_lines.h"
#include "persistence/layers.h"
#include "persistence/sha256.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBlock = 1 << 20;
// Never blocks on a FIFO or a lease, never follows a symlink, never takes a tty.
constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC;

// Test only: AGENTBOX_TEST_ARCHIVE_DELAY_US makes the helper sleep between
// learning a file's metadata (fstat of its descriptor) and reading it, to widen the window in which a
// box swaps the entry (tests/persistence/snapshot_safety_test.cpp). Read by
// the helper only; unset in production.
void test_delay() {
  static const long us = [] {
    const char* v = std::getenv("AGENTBOX_TEST_ARCHIVE_DELAY_US");
    return v && *v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

struct FdCloser {
  int fd = -1;
  explicit FdCloser(int f) : fd(f) {}
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

class Writer {
 public:
  Writer(local::ArchiveOut& out, const WriteOptions& options)
      : options_(options), buffer_(kBlock), out_(out), a_(out.get()) {
    resolver_ = archive_entry_linkresolver_new();
    archive_entry_linkresolver_set_strategy(resolver_, ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE);
    // Incremental snapshots (layers.h): what the parent's files were, where
    // this snapshot's stamps go, and the parent entry first.
    if (!options.parent.empty()) baseline_ = layers::Baseline::load(options.baseline_in, options.parent);
    if (!options.baseline_out.empty())
      stamps_.emplace(options.baseline_out, options.snapshot_id, layers::Instant::racy_limit());
    out_.meta(layers::kParentEntry, options.parent);
  }
  ~Writer() { archive_entry_linkresolver_free(resolver_); }

  void tree(const ArchiveTree& t) {
    tops_.push_back(t.name);
    check_path(t.name);
    int fd = open(t.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw ArchiveError(os::errno_text("cannot open " + t.dir.string(), errno));
    FdCloser closer(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) throw ArchiveError(os::errno_text("cannot stat " + t.dir.string(), errno));
    header(t.name, st, nullptr);
    walk(fd, t.name);
  }

  void finish() {
    // Hard links whose other names were never seen are emitted last.
    archive_entry* entry = nullptr;
    archive_entry* sparse = nullptr;
    archive_entry_linkify(resolver_, &entry, &sparse);
    while (entry) {
      write_header(entry);
      archive_entry_free(entry);
      entry = nullptr;
      archive_entry_linkify(resolver_, &entry, &sparse);
    }
    out_.meta(layers::kPathsEntry, paths_.text());
    out_.close();
    if (stamps_) stamps_->finish();
  }

  WriteResult result;

 private:
  void walk(int dir_fd, const std::string& prefix) {
    // Names first, then children: one descriptor per level of depth.
    std::vector<std::string> names;
    {
      int copy = dup(dir_fd);
      DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
      if (!d) {
        if (copy >= 0) close(copy);
        throw ArchiveError(os::errno_text("cannot list " + prefix, errno));
      }
      while (dirent* e = readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) entry(dir_fd, name, prefix + "/" + name);
  }

  // What restore would refuse is refused here, before anything is removed
  // (archive_rules.h).
  void check_path(const std::string& path) const {
    if (auto problem = entry_path_problem(path, tops_); !problem.empty())
      throw ArchiveError(problem + "; the snapshot was not taken, so nothing of the workspace is removed "
                                   "(shorten or remove that path)");
  }

  // One entry, judged by its opened descriptor (docs/design.md section 8,
  // "Snapshots a box cannot hang or tear"): opened first with
  // O_NONBLOCK | O_NOFOLLOW, so a FIFO swapped in never blocks the open, a
  // leased file answers EWOULDBLOCK instead of holding the helper for the
  // lease-break time, and type, size and bytes all come from one inode even
  // when the name is renamed over meanwhile.
  void entry(int dir_fd, const std::string& name, const std::string& path) {
    check_path(path);
    // Unchanged since the parent: judged without opening it, as nothing of
    // it is read (an open costs more than the stat, and most files match).
    if (baseline_.size() > 0) {
      struct stat st;
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && inherited(path, st)) {
        if (stamps_) stamps_->add(path, st);
        paths_.add('I', path);
        ++result.files;
        return;
      }
    }
    for (int attempt = 0;; ++attempt) {
      int fd = openat(dir_fd, name.c_str(), kOpenFlags | O_NOATIME);
      if (fd < 0 && errno == EPERM) fd = openat(dir_fd, name.c_str(), kOpenFlags);
      if (fd >= 0) {
        FdCloser closer(fd);
        struct stat st;
        if (fstat(fd, &st) != 0) throw ArchiveError(os::errno_text("cannot stat " + path, errno));
        if (S_ISDIR(st.st_mode)) {
          header(path, st, nullptr);
          walk(fd, path);
        } else if (S_ISREG(st.st_mode)) {
          regular(fd, path, st);
        } else if (S_ISFIFO(st.st_mode)) {
          header(path, st, nullptr);
        } else {
          ++result.skipped;  // devices: nothing to restore them as
        }
        return;
      }
      int err = errno;
      if (err == ENOENT) return;  // deleted while we walked
      if (err == ENXIO) {         // a socket: open(2) refuses it
        ++result.skipped;
        return;
      }
      if (err == ELOOP && symlink_entry(dir_fd, name, path)) return;
      if (err == EWOULDBLOCK && attempt < 10) {
        // The open started breaking the lease; a holder that cooperates lets go within milliseconds.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (err == EWOULDBLOCK)
        throw ArchiveError(path + " is held by a file lease (fcntl F_SETLEASE) of a process outside the box; "
                                  "it cannot be read now, so no snapshot was taken");
      if (err != ELOOP || attempt >= 3) throw ArchiveError(os::errno_text("cannot open " + path, err));
    }
  }

  // False when the name is no longer a symlink (swapped: open it again).
  bool symlink_entry(int dir_fd, const std::string& name, const std::string& path) {
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode)) return false;
    std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
    ssize_t n = readlinkat(dir_fd, name.c_str(), target.data(), target.size());
    if (n < 0) return false;
    target.resize(static_cast<std::size_t>(n));
    header(path, st, &target);
    return true;
  }

  archive_entry* make_entry(const std::string& path, const struct stat& st) {
    archive_entry* e = archive_entry_new();
    archive_entry_copy_pathname(e, path.c_str());
    archive_entry_set_mode(e, st.st_mode);
    archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    // No host ownership: the restoring side decides who owns the files.
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_size(e, S_ISREG(st.st_mode) ? st.st_size : 0);
    archive_entry_set_dev(e, st.st_dev);
    archive_entry_set_ino64(e, st.st_ino);
    archive_entry_set_nlink(e, st.st_nlink);
    return e;
  }

  void header(const std::string& path, const struct stat& st, const std::string* link_target) {
    archive_entry* e = make_entry(path, st);
    if (link_target) archive_entry_copy_symlink(e, link_target->c_str());
    write_header(e);
    archive_entry_free(e);
  }

  void write_header(archive_entry* e) {
    std::string name = archive_entry_pathname(e);  // the pax writer adds a '/' to a directory's
    out_.header(e);
    paths_.add('S', name);
    ++result.files;
    ++result.stored;
  }

  // A file unchanged since the parent: the same inode, unmodified since
  // its stamp was taken (layers.h). Only single-link files: a hard link's
  // other names are stored with it.
  bool inherited(const std::string& path, const struct stat& st) {
    if (st.st_nlink != 1) return false;
    const layers::Stamp* before = baseline_.find(path);
    return before && *before == layers::stamp_of(st);
  }

  // Exactly what the descriptor holds: a file up to one block is read whole
  // before its header, so the entry has the size that was read (a file that
  // shrank is stored as it was read, never padded); a larger one streams its
  // size at open, and one that shrinks while it streams (written in place by
  // a running process) fails the snapshot instead of being padded with NULs.
  void regular(int fd, const std::string& path, const struct stat& st) {
    if (stamps_) stamps_->add(path, st);  // inherited files were judged (and stamped) by entry()
    archive_entry* e = make_entry(path, st);
    std::unique_ptr<archive_entry, decltype(&archive_entry_free)> owned(e, archive_entry_free);
    test_delay();
    std::uint64_t want = static_cast<std::uint64_t>(st.st_size);
    bool whole = want <= buffer_.size();
    std::uint64_t got = 0;
    if (whole) {
      got = read_some(fd, path, buffer_.data(), want);
      archive_entry_set_size(e, static_cast<la_int64_t>(got));
    } else {
      map_holes(fd, e, st);
    }
    archive_entry* sparse_out = nullptr;
    archive_entry* linked = e;
    if (st.st_nlink > 1) {
      owned.release();
      archive_entry_linkify(resolver_, &linked, &sparse_out);
      owned.reset(linked);
      if (!linked) return;  // deferred by the resolver (not for tar strategies)
    }
    write_header(linked);
    if (archive_entry_size(linked) == 0) return;  // a hard link to an earlier entry, or empty
    if (whole) {
      data(path, buffer_.data(), got);
      report();
      return;
    }
    for (std::uint64_t done = 0; done < want;) {
      std::uint64_t n = read_some(fd, path, buffer_.data(), std::min<std::uint64_t>(buffer_.size(), want - done));
      if (n == 0)
        throw ArchiveError(path + " shrank from " + std::to_string(want) + " to " + std::to_string(done) +
                           " bytes while it was archived (a running process rewrote it in place); no snapshot "
                           "was taken, take it again");
      data(path, buffer_.data(), n);
      done += n;
    }
    report();
  }

  // Up to `want` bytes, fewer only at the end of the file.
  std::uint64_t read_some(int fd, const std::string& path, char* to, std::uint64_t want) {
    std::uint64_t got = 0;
    while (got < want) {
      ssize_t n = ::read(fd, to + got, want - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw ArchiveError(os::errno_text("cannot read " + path, errno));
      if (n == 0) break;
      got += static_cast<std::uint64_t>(n);
    }
    return got;
  }

  void data(const std::string& path, const char* p, std::uint64_t n) {
    // In a sparse entry the pax writer drops the bytes that fall in holes.
    out_.data(path, p, static_cast<std::size_t>(n));
    result.input_bytes += n;
    if (result.input_bytes > kMaxRestoreBytes)
      throw ArchiveError("the workspace holds more than " + std::to_string(kMaxRestoreBytes) +
                         " bytes, more than a restore unpacks; no snapshot was taken");
    report();
  }

  // Holes: a file using fewer blocks than its size has some; map its data.
  void map_holes(int fd, archive_entry* e, const struct stat& st) {
    if (st.st_size == 0 || static_cast<std::uint64_t>(st.st_blocks) * 512 >= static_cast<std::uint64_t>(st.st_size))
      return;
    off_t pos = 0;
    while (pos < st.st_size) {
      off_t data_at = lseek(fd, pos, SEEK_DATA);
      if (data_at < 0) break;  // ENXIO: only a hole is left
      off_t hole = lseek(fd, data_at, SEEK_HOLE);
      if (hole < 0) hole = st.st_size;
      hole = std::min<off_t>(hole, st.st_size);
      archive_entry_sparse_add_entry(e, data_at, hole - data_at);
      pos = hole;
    }
    if (archive_entry_sparse_count(e) == 0) archive_entry_sparse_add_entry(e, st.st_size, 0);
    lseek(fd, 0, SEEK_SET);
  }

  void report() {
    if (!options_.progress) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < std::chrono::milliseconds(200)) return;
    last_report_ = now;
    options_.progress({result.input_bytes, result.files, std::nullopt});
  }

  const WriteOptions& options_;
  layers::Baseline baseline_;
  std::optional<layers::BaselineWriter> stamps_;
  layers::PathList paths_;
  std::vector<std::string> tops_;  // the trees' names, the top-level names restore accepts
  std::vector<char> buffer_;
  local::ArchiveOut& out_;
  struct archive* a_;
  archive_entry_linkresolver* resolver_ = nullptr;
  std::chrono::steady_clock::time_point last_report_ = std::chrono::steady_clock::now();
};

}  // namespace

namespace local {

WriteResult write_archive_file(const std::vector<ArchiveTree>& trees, const fs::path& temp, const WriteOptions& options) {
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw ArchiveError(os::errno_text("cannot create " + temp.string(), errno));
  FdCloser closer(fd);
  try {
    WriteResult result;
    {
      ArchiveOut out(fd, options);
      Writer writer(out, options);
      for (const auto& t : trees) writer.tree(t);
      writer.finish();
      result = writer.result;
      result.archive_bytes = out.sink().written;
      result.digest = out.digest();
    }
    // Durable before it gets its final name: a rename that survives a crash
    // must never point at unwritten blocks.
    if (fsync(fd) != 0) throw ArchiveError(os::errno_text("cannot sync " + temp.string(), errno));
    return result;
  } catch (...) {
    unlink(temp.c_str());
    throw;
  }
}

std::string file_digest(const fs::path& file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ArchiveError(os::errno_text("cannot open " + file.string(), errno));
  FdCloser closer(fd);
  Sha256 sha;
  std::vector<char> buf(kBlock);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ArchiveError(os::errno_text("cannot read " + file.string(), errno));
    if (n == 0) break;
    sha.update(buf.data(), static_cast<std::size_t>(n));
  }
  return sha.finish();
}

}  // namespace local

}  // namespace agentbox::persistence
