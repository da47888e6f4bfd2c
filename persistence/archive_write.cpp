// Snapshot writing: tree walk → pax entries → zstd → temporary file.
#include "persistence/archive_local.h"
#include "persistence/child_lines.h"
#include "persistence/sha256.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBlock = 1 << 20;

struct FdCloser {
  int fd = -1;
  explicit FdCloser(int f) : fd(f) {}
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// Where compressed bytes go: the temporary file, hashed on the way.
struct Sink {
  int fd = -1;
  Sha256 sha;
  std::uint64_t written = 0;
  int error = 0;
};

la_ssize_t sink_write(struct archive*, void* data, const void* buffer, size_t length) {
  auto* sink = static_cast<Sink*>(data);
  const char* p = static_cast<const char*>(buffer);
  std::size_t left = length;
  while (left > 0) {
    ssize_t n = ::write(sink->fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      sink->error = errno;
      return -1;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  sink->sha.update(buffer, length);
  sink->written += length;
  return static_cast<la_ssize_t>(length);
}

class Writer {
 public:
  Writer(Sink& sink, const WriteOptions& options) : options_(options), buffer_(kBlock) {
    a_ = archive_write_new();
    resolver_ = archive_entry_linkresolver_new();
    archive_entry_linkresolver_set_strategy(resolver_, ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE);
    // Full pax (not "restricted"): every entry carries its nanosecond mtime.
    check(archive_write_set_format_pax(a_), "pax format");
    // Names are stored as the bytes they are, whatever the server's locale:
    // a UTF-8 (or any) name round-trips exactly.
    check(archive_write_set_format_option(a_, "pax", "hdrcharset", "BINARY"), "pax hdrcharset");
    check(archive_write_add_filter_zstd(a_), "zstd filter");
    check(archive_write_set_filter_option(a_, "zstd", "compression-level", std::to_string(options.level).c_str()),
          "zstd level");
    unsigned threads = options.threads > 0 ? static_cast<unsigned>(options.threads)
                                           : std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    // Worker threads compress while this thread reads files (libarchive
    // ≥ 3.6 with a multithreaded libzstd); without them it is one thread.
    if (threads > 1) archive_write_set_filter_option(a_, "zstd", "threads", std::to_string(threads).c_str());
    archive_write_set_bytes_per_block(a_, 64 * 1024);
    archive_write_set_bytes_in_last_block(a_, 1);
    if (archive_write_open(a_, &sink, nullptr, sink_write, nullptr) != ARCHIVE_OK)
      throw ArchiveError(error_text("cannot start the archive", sink));
    sink_ = &sink;
  }
  ~Writer() {
    archive_entry_linkresolver_free(resolver_);
    archive_write_free(a_);
  }

  void tree(const ArchiveTree& t) {
    int fd = open(t.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw ArchiveError(errno_text("cannot open " + t.dir.string(), errno));
    FdCloser closer(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) throw ArchiveError(errno_text("cannot stat " + t.dir.string(), errno));
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
    if (archive_write_close(a_) != ARCHIVE_OK) throw ArchiveError(error_text("cannot finish the archive", *sink_));
  }

  WriteResult result;

 private:
  void check(int rc, const char* what) {
    if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("libarchive ") + what + ": " + archive_error_string(a_));
  }
  std::string error_text(const std::string& what, const Sink& sink) {
    if (sink.error) return errno_text(what, sink.error);
    const char* e = archive_error_string(a_);
    return what + ": " + (e ? e : "unknown libarchive error");
  }

  void walk(int dir_fd, const std::string& prefix) {
    // Names first, then children: one descriptor per level of depth.
    std::vector<std::string> names;
    {
      int copy = dup(dir_fd);
      DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
      if (!d) {
        if (copy >= 0) close(copy);
        throw ArchiveError(errno_text("cannot list " + prefix, errno));
      }
      while (dirent* e = readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      struct stat st;
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // deleted while we walked
        throw ArchiveError(errno_text("cannot stat " + prefix + "/" + name, errno));
      }
      std::string path = prefix + "/" + name;
      if (S_ISDIR(st.st_mode)) {
        int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
          if (errno == ENOENT) continue;
          throw ArchiveError(errno_text("cannot open " + path, errno));
        }
        FdCloser closer(fd);
        header(path, st, nullptr);
        walk(fd, path);
      } else if (S_ISREG(st.st_mode)) {
        regular(dir_fd, name, path, st);
      } else if (S_ISLNK(st.st_mode)) {
        std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
        ssize_t n = readlinkat(dir_fd, name.c_str(), target.data(), target.size());
        if (n < 0) throw ArchiveError(errno_text("cannot read link " + path, errno));
        target.resize(static_cast<std::size_t>(n));
        header(path, st, &target);
      } else if (S_ISFIFO(st.st_mode)) {
        header(path, st, nullptr);
      } else {
        ++result.skipped;  // sockets and devices: nothing to restore them as
      }
    }
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
    int rc = archive_write_header(a_, e);
    if (rc < ARCHIVE_WARN) throw ArchiveError(error_text("cannot write " + std::string(archive_entry_pathname(e)), *sink_));
    ++result.files;
  }

  void regular(int dir_fd, const std::string& name, const std::string& path, const struct stat& st) {
    int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return;
      throw ArchiveError(errno_text("cannot open " + path, errno));
    }
    FdCloser closer(fd);
    archive_entry* e = make_entry(path, st);
    std::unique_ptr<archive_entry, decltype(&archive_entry_free)> owned(e, archive_entry_free);
    // Holes: a file using fewer blocks than its size has some; map its data.
    bool sparse = st.st_size > 0 && static_cast<std::uint64_t>(st.st_blocks) * 512 < static_cast<std::uint64_t>(st.st_size);
    if (sparse) {
      off_t pos = 0;
      while (pos < st.st_size) {
        off_t data = lseek(fd, pos, SEEK_DATA);
        if (data < 0) break;  // ENXIO: only a hole is left
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0) hole = st.st_size;
        hole = std::min<off_t>(hole, st.st_size);
        archive_entry_sparse_add_entry(e, data, hole - data);
        pos = hole;
      }
      if (archive_entry_sparse_count(e) == 0) archive_entry_sparse_add_entry(e, st.st_size, 0);
      lseek(fd, 0, SEEK_SET);
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
    std::uint64_t want = static_cast<std::uint64_t>(st.st_size), done = 0;
    while (done < want) {
      ssize_t n = ::read(fd, buffer_.data(), std::min<std::uint64_t>(buffer_.size(), want - done));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw ArchiveError(errno_text("cannot read " + path, errno));
      }
      if (n == 0) {
        // The file shrank while we read it: pad, so the entry stays valid.
        std::fill(buffer_.begin(), buffer_.end(), 0);
        n = static_cast<ssize_t>(std::min<std::uint64_t>(buffer_.size(), want - done));
      }
      // In a sparse entry the pax writer drops the bytes that fall in holes.
      if (archive_write_data(a_, buffer_.data(), static_cast<std::size_t>(n)) < 0)
        throw ArchiveError(error_text("cannot archive " + path, *sink_));
      done += static_cast<std::uint64_t>(n);
      result.input_bytes += static_cast<std::uint64_t>(n);
      report();
    }
    report();
  }

  void report() {
    if (!options_.progress) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < std::chrono::milliseconds(200)) return;
    last_report_ = now;
    options_.progress({result.input_bytes, result.files, std::nullopt});
  }

  const WriteOptions& options_;
  std::vector<char> buffer_;
  struct archive* a_ = nullptr;
  archive_entry_linkresolver* resolver_ = nullptr;
  Sink* sink_ = nullptr;
  std::chrono::steady_clock::time_point last_report_ = std::chrono::steady_clock::now();
};

}  // namespace

namespace local {

WriteResult write_archive_file(const std::vector<ArchiveTree>& trees, const fs::path& temp, const WriteOptions& options) {
  Sink sink;
  sink.fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (sink.fd < 0) throw ArchiveError(errno_text("cannot create " + temp.string(), errno));
  FdCloser closer(sink.fd);
  try {
    WriteResult result;
    {
      Writer writer(sink, options);
      for (const auto& t : trees) writer.tree(t);
      writer.finish();
      result = writer.result;
    }
    // Durable before it gets its final name: a rename that survives a crash
    // must never point at unwritten blocks.
    if (fsync(sink.fd) != 0) throw ArchiveError(errno_text("cannot sync " + temp.string(), errno));
    result.archive_bytes = sink.written;
    result.digest = sink.sha.finish();
    return result;
  } catch (...) {
    unlink(temp.c_str());
    throw;
  }
}

std::string file_digest(const fs::path& file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ArchiveError(errno_text("cannot open " + file.string(), errno));
  FdCloser closer(fd);
  Sha256 sha;
  std::vector<char> buf(kBlock);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ArchiveError(errno_text("cannot read " + file.string(), errno));
    if (n == 0) break;
    sha.update(buf.data(), static_cast<std::size_t>(n));
  }
  return sha.finish();
}

}  // namespace local

}  // namespace agentbox::persistence
