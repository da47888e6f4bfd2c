#include "persistence/archive_out.h"

#include "persistence/archive_local.h"
#include "os/errno_text.h"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence::local {

namespace {

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

}  // namespace

ArchiveOut::ArchiveOut(int fd, const WriteOptions& options) {
  sink_.fd = fd;
  a_ = archive_write_new();
  auto check = [&](int rc, const char* what) {
    if (rc < ARCHIVE_WARN) throw ArchiveError(std::string("libarchive ") + what + ": " + archive_error_string(a_));
  };
  try {
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
    if (archive_write_open(a_, &sink_, nullptr, sink_write, nullptr) != ARCHIVE_OK)
      throw ArchiveError(error_text("cannot start the archive"));
  } catch (...) {
    archive_write_free(a_);
    throw;
  }
}

ArchiveOut::~ArchiveOut() { archive_write_free(a_); }

std::string ArchiveOut::error_text(const std::string& what) {
  if (sink_.error) return os::errno_text(what, sink_.error);
  return what + ": " + archive_message(a_);
}

void ArchiveOut::header(archive_entry* e) {
  if (archive_write_header(a_, e) < ARCHIVE_WARN)
    throw ArchiveError(error_text("cannot write " + std::string(archive_entry_pathname(e))));
}

void ArchiveOut::data(const std::string& path, const void* p, std::size_t n) {
  if (archive_write_data(a_, p, n) < 0) throw ArchiveError(error_text("cannot archive " + path));
}

void ArchiveOut::meta(std::string_view name, const std::string& text) {
  archive_entry* e = archive_entry_new();
  std::unique_ptr<archive_entry, decltype(&archive_entry_free)> owned(e, archive_entry_free);
  archive_entry_copy_pathname(e, std::string(name).c_str());
  archive_entry_set_mode(e, AE_IFREG | 0600);
  archive_entry_set_size(e, static_cast<la_int64_t>(text.size()));
  header(e);
  if (!text.empty()) data(std::string(name), text.data(), text.size());
}

void ArchiveOut::close() {
  if (archive_write_close(a_) != ARCHIVE_OK) throw ArchiveError(error_text("cannot finish the archive"));
}

}  // namespace agentbox::persistence::local
