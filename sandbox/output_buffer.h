// Bounded capture of one output stream (stdout or stderr of a command).
// Keeps the first `head` bytes and the last `tail` bytes; what falls in
// between is dropped and counted, so a 1 GB flood costs at most head+tail of
// memory while byte offsets into the full stream stay meaningful for paging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentbox::sandbox {

class OutputBuffer {
 public:
  OutputBuffer(std::size_t head_bytes, std::size_t tail_bytes);

  void append(std::string_view data);
  std::uint64_t total() const { return total_; }
  // Bytes no longer held (between the head and the tail).
  std::uint64_t dropped() const { return tail_start_ - head_.size(); }

  struct Slice {
    std::string data;             // may start with a marker when bytes were dropped
    std::uint64_t next_offset = 0;
    std::uint64_t skipped = 0;    // bytes between offset and the first byte returned
  };
  // Up to max_bytes from byte offset `offset` of the full stream.
  Slice read(std::uint64_t offset, std::size_t max_bytes) const;

  // The whole stream if it fits in budget, else its head and tail around a
  // marker. `resume_hint` is appended to the marker (how to read the rest).
  struct Inline {
    std::string text;
    bool truncated = false;
  };
  Inline inline_view(std::size_t budget, const std::string& resume_hint) const;

 private:
  std::string bytes_between(std::uint64_t from, std::uint64_t to) const;  // held bytes only

  std::size_t head_cap_;
  std::size_t tail_cap_;
  std::string head_;
  std::string tail_;                // bytes [tail_start_, total_)
  std::uint64_t tail_start_ = 0;
  std::uint64_t total_ = 0;
};

// Shortens s to at most n bytes without splitting a UTF-8 sequence, cutting
// from the end (keep_front) or from the front.
std::string_view utf8_prefix(std::string_view s, std::size_t n);
std::string_view utf8_suffix(std::string_view s, std::size_t n);

// How an inline budget is shared between stdout and stderr: each stream gets
// what it needs when both fit; otherwise stderr keeps at least a quarter.
std::pair<std::size_t, std::size_t> split_budget(std::uint64_t out, std::uint64_t err, std::size_t budget);

}  // namespace agentbox::sandbox
