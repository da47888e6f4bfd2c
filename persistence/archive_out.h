// The snapshot format on the writing side, shared by writing a tree
// (archive_write.cpp) and merging two archives (archive_merge.cpp): pax
// (full, names as bytes), zstd at the options' level and threads, written to
// a descriptor and hashed (SHA-256) on the way.
#pragma once

#include "persistence/archive.h"
#include "persistence/sha256.h"

#include <archive.h>
#include <archive_entry.h>

#include <string>
#include <string_view>

namespace agentbox::persistence::local {

struct Sink {
  int fd = -1;
  Sha256 sha;
  std::uint64_t written = 0;
  int error = 0;
};

class ArchiveOut {
 public:
  ArchiveOut(int fd, const WriteOptions& options);
  ~ArchiveOut();
  ArchiveOut(const ArchiveOut&) = delete;
  ArchiveOut& operator=(const ArchiveOut&) = delete;

  struct archive* get() { return a_; }
  const Sink& sink() const { return sink_; }
  // What went wrong, from the sink's errno or libarchive's message.
  std::string error_text(const std::string& what);
  // Throws ArchiveError naming the entry.
  void header(archive_entry* e);
  void data(const std::string& path, const void* p, std::size_t n);
  // One of the archive's own entries (layers.h): a regular file of `text`.
  void meta(std::string_view name, const std::string& text);
  void close();  // ends the stream; the caller fsyncs the descriptor
  std::string digest() { return sink_.sha.finish(); }  // after close, once

 private:
  struct archive* a_ = nullptr;
  Sink sink_;
};

}  // namespace agentbox::persistence::local
