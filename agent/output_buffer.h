// Bounded capture of one output stream (stdout or stderr of a command).
// Keeps the first `head` bytes and the last `tail` bytes; what falls in
// between is dropped and counted, so a 1 GB flood costs at most head+tail of
// memory while byte offsets into the full stream stay meaningful for paging.
//
// Also the measure of what a tool result shows (docs/files.md, "What hosts
// show"): a payload appears twice in a result, raw in the text content and
// JSON-escaped in structuredContent, so its cost is both together, and a
// text keeps under kMaxShownLines lines so a host that keeps only the first
// 2,000 lines still shows its last line.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentbox::agent {

inline constexpr std::size_t kMaxShownLines = 1'000;

// The cost of s in a result: its bytes in the text plus its JSON-escaped
// bytes (a byte that is not UTF-8 counts as U+FFFD, which the JSON writer
// puts in its place).
std::size_t shown_cost(std::string_view s);
// Bytes of the longest prefix of s that costs at most `budget`, has at most
// `max_lines` newlines and ends on a character boundary.
std::size_t fit_prefix(std::string_view s, std::size_t budget, std::size_t max_lines);
// The same from the end: how many bytes of the end of s fit.
std::size_t fit_suffix(std::string_view s, std::size_t budget, std::size_t max_lines);

class OutputBuffer {
 public:
  OutputBuffer(std::size_t head_bytes, std::size_t tail_bytes);

  void append(std::string_view data);
  std::uint64_t total() const { return total_; }
  std::uint64_t lines() const { return lines_; }
  // Bytes no longer held (between the head and the tail).
  std::uint64_t dropped() const { return tail_start_ - head_.size(); }

  struct Slice {
    std::string data;             // may start with a marker when bytes were dropped
    std::uint64_t next_offset = 0;
    std::uint64_t skipped = 0;    // bytes between offset and the first byte returned
  };
  // From byte offset `offset` of the full stream, what fits in `budget`
  // (shown_cost) and `max_lines`; at least one character when any is left.
  Slice read(std::uint64_t offset, std::size_t budget, std::size_t max_lines = kMaxShownLines) const;

  // Every byte still held from `offset` on (what a pattern is matched against).
  std::string held_from(std::uint64_t offset) const { return bytes_between(offset, total_); }
  // The same in place, as the head's and the tail's runs (either may be
  // empty); valid until the next append.
  struct Run {
    std::uint64_t offset = 0;
    std::string_view bytes;
  };
  std::array<Run, 2> held_runs(std::uint64_t offset) const;

  // The whole stream if it fits in budget and max_lines, else its head and
  // tail around a one-line marker. `cut_from` is the first byte not shown
  // (where process_output would page on).
  struct Inline {
    std::string text;
    bool truncated = false;
    std::uint64_t cut_from = 0;
  };
  Inline inline_view(std::size_t budget, std::size_t max_lines = kMaxShownLines) const;

 private:
  std::string bytes_between(std::uint64_t from, std::uint64_t to) const;  // held bytes only

  std::size_t head_cap_;
  std::size_t tail_cap_;
  std::string head_;
  std::string tail_;                // bytes [tail_start_, total_)
  std::uint64_t tail_start_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t lines_ = 0;
};

// What `bytes` of output cost at most, for sharing a budget: 2 a character,
// 3 a newline (control characters, rarer, are cut by the real cost anyway).
inline std::uint64_t cost_bound(std::uint64_t bytes) { return 3 * bytes + 16; }

// How an inline budget is shared between stdout and stderr: each stream gets
// what it needs when both fit; otherwise stderr keeps at least a quarter.
std::pair<std::size_t, std::size_t> split_budget(std::uint64_t out, std::uint64_t err, std::size_t budget);

}  // namespace agentbox::agent
