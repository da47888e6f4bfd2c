// A pattern matched against lines of text: POSIX extended regular
// expressions (grep -E), compiled by the C library's regcomp. Shared by
// file_search, process_output and the terminal tools (docs/design.md,
// "Patterns").
//
// Why not std::regex: libstdc++'s matcher recurses per character, so a
// 30 KB line against `a.*z` overflows the stack and kills the agent, and
// `(a*)*b` backtracks without end. glibc's matcher is a DFA-style engine
// without recursion, but its time still grows with the square of a line's
// length for such patterns (100 KB: ~30 s), so output being waited on is
// matched line by line with each line cut to kMaxScannedLineBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <regex.h>
#include <string>
#include <string_view>

namespace agentbox::agent {

class OutputBuffer;

// The bytes of a line that a wait's pattern is matched against: lines of
// output longer than this are matched on their first kMaxScannedLineBytes.
inline constexpr std::size_t kMaxScannedLineBytes = 1024;

class LinePattern {
 public:
  // Throws SandboxError(INVALID_ARGUMENTS) naming what is wrong. `\d` and
  // `\D` outside brackets are taken as [0-9] and [^0-9] (the one
  // Perl-style class models write that POSIX lacks; \w \s \b are GNU ERE).
  explicit LinePattern(const std::string& pattern, bool ignore_case = false);
  ~LinePattern();
  LinePattern(const LinePattern&) = delete;
  LinePattern& operator=(const LinePattern&) = delete;

  // Whether [begin, end) (one line, no newline) matches; not copied.
  bool matches(const char* begin, const char* end) const;
  bool matches(std::string_view line) const { return matches(line.data(), line.data() + line.size()); }
  // Whether any line of `text` matches (each cut to kMaxScannedLineBytes).
  bool search_lines(std::string_view text) const;

 private:
  regex_t re_;
};

// Matches a growing stream line by line, each byte examined once: complete
// lines when their newline arrives, the line still open each time it grew
// (a prompt has no newline). Bytes the buffer dropped are skipped.
class LineScanner {
 public:
  LineScanner(const LinePattern& pattern, std::uint64_t from) : pattern_(pattern), next_(from) {}

  // Feeds `bytes`, which start at `offset` of the stream; true when a line
  // matched (now or in an earlier call).
  bool feed(std::uint64_t offset, std::string_view bytes);
  // Feeds what `buffer` holds past what was already fed.
  bool scan(const OutputBuffer& buffer);
  bool matched() const { return matched_; }

 private:
  void test_line();

  const LinePattern& pattern_;
  std::uint64_t next_;            // stream offset of the first byte not yet fed
  std::string line_;              // the open line's first kMaxScannedLineBytes
  bool line_tested_ = false;      // line_ unchanged since it was last matched
  bool matched_ = false;
};

}  // namespace agentbox::agent
