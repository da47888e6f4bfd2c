// agent/line_pattern: the patterns process_output, the terminal tools and
// file_search match with (POSIX ERE, line by line, lines cut to a bound),
// including the inputs that crashed or hung std::regex.
#include "agent/line_pattern.h"
#include "agent/output_buffer.h"
#include "contract/errors.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using agentbox::SandboxError;
using agentbox::agent::kMaxScannedLineBytes;
using agentbox::agent::LinePattern;
using agentbox::agent::LineScanner;
using agentbox::agent::OutputBuffer;

namespace {

bool scan_all(const std::string& pattern, const std::string& text) {
  LinePattern p(pattern);
  LineScanner s(p, 0);
  return s.feed(0, text);
}

}  // namespace

TEST_CASE("patterns are extended regular expressions matched line by line", "[pattern]") {
  CHECK(scan_all("^42", ">>> 6*7\n42\n>>> "));
  CHECK(scan_all(">>> ", "Python 3\n>>> "));  // the open line (a prompt) counts
  CHECK(scan_all("PID +USER", "  PID USER      PR\n"));
  CHECK(scan_all("listening on \\d+", "Server listening on 8080\n"));
  CHECK_FALSE(scan_all("listening on \\d+", "Server listening on port\n"));
  CHECK(scan_all("24 80\\r?\\n", "stty size\r\n24 80\r\n$ "));  // \r \n are the characters
  CHECK(scan_all("done$", "all done\nmore\n"));
  CHECK_FALSE(scan_all("^done", "not done\n"));
  CHECK(scan_all("[\\d]", "a\\b"));                // in brackets a backslash is itself
  CHECK(scan_all("[]x]+z", "]]z"));
  CHECK(scan_all("[^]a]b", "cb"));
  CHECK(scan_all("[[:digit:]]+ files", "12 files\n"));
  CHECK_FALSE(scan_all("a.b", "a\nb"));             // a match never spans lines
  LinePattern nocase("HELLO", true);
  CHECK(nocase.matches(std::string_view("say hello")));
}

TEST_CASE("a bad pattern is INVALID_ARGUMENTS with the reason", "[pattern]") {
  for (const std::string& bad : {std::string("("), std::string("a{2,1}"), std::string("[z-a]"), std::string("a\0b", 3)}) {
    try {
      LinePattern p(bad);
      FAIL("accepted " << bad);
    } catch (const SandboxError& e) {
      CHECK(e.code() == agentbox::codes::kInvalidArguments);
      CHECK(std::string(e.what()).find("pattern") != std::string::npos);
    }
  }
}

TEST_CASE("a scanner sees lines split across feeds, once each, and skips dropped bytes", "[pattern]") {
  LinePattern p("hello, agent");
  LineScanner s(p, 0);
  CHECK_FALSE(s.feed(0, "say hel"));
  CHECK_FALSE(s.feed(7, "lo,"));
  CHECK(s.feed(10, " agent\n"));
  CHECK(s.matched());

  // Bytes before the scanner's start are not matched.
  LineScanner late(p, 13);
  CHECK_FALSE(late.feed(0, "hello, agent\n"));
  CHECK(late.feed(13, "hello, agent"));

  // A gap (bytes the buffer dropped) ends the open line.
  LinePattern joined("ab");
  LineScanner gap(joined, 0);
  CHECK_FALSE(gap.feed(0, "a"));
  CHECK_FALSE(gap.feed(100, "b\n"));
}

TEST_CASE("a scanner reads an output buffer's head and tail across its gap", "[pattern]") {
  OutputBuffer buffer(16, 16);
  buffer.append(std::string(8, 'x') + "\nfirst\n");
  buffer.append(std::string(1000, 'y') + "\n");
  buffer.append("needle here\n");
  LinePattern p("^needle");
  LineScanner s(p, 0);
  CHECK(s.scan(buffer));
}

TEST_CASE("huge lines and pathological patterns neither crash nor hang", "[pattern][wall]") {
  // std::regex overflowed its stack on `a.*z` over ~30 KB and never ended
  // on `(a*)*b`; each line is now matched on its first kMaxScannedLineBytes.
  std::string line(200'000, 'a');
  line += "z\nready\n";
  for (const char* pattern : {"a.*z", "(a|b)*c", "(a*)*b", "((a+)+)+c", "(.*)*x"}) {
    auto start = std::chrono::steady_clock::now();
    LinePattern p(pattern);
    LineScanner s(p, 0);
    s.feed(0, line);
    CHECK_FALSE(p.search_lines(line));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
  // What lies past the bound of a line is not seen; the next line is.
  CHECK_FALSE(scan_all("z$", line.substr(0, 200'002)));
  CHECK(scan_all("^ready", line));
  CHECK(scan_all("a{10}z", std::string(kMaxScannedLineBytes - 1, 'a') + "z"));
}
