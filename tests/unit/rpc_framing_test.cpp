// rpc/framing: LineReader over a real pipe, with the bytes arriving in chosen
// pieces (one piece per read(), fed from the before_read hook), and LineWriter.
#include "rpc/framing.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <deque>
#include <string>
#include <thread>
#include <vector>

using agentbox::rpc::LineReader;
using agentbox::rpc::LineWriter;

namespace {

// A pipe whose write end is fed one piece per read() of the reader, then
// closed: a read on a pipe returns what is there, so each piece is one read.
class PipeFeed {
 public:
  explicit PipeFeed(std::vector<std::string> pieces) : pieces_(pieces.begin(), pieces.end()) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    read_fd_ = fds[0];
    write_fd_ = fds[1];
  }
  ~PipeFeed() {
    ::close(read_fd_);
    close_write();
  }
  PipeFeed(const PipeFeed&) = delete;
  PipeFeed& operator=(const PipeFeed&) = delete;

  int read_fd() const { return read_fd_; }
  int reads() const { return reads_; }

  // The before_read hook: puts the next piece in the pipe, or closes it.
  bool feed() {
    ++reads_;
    if (pieces_.empty()) {
      close_write();
    } else {
      REQUIRE(agentbox::rpc::write_all(write_fd_, pieces_.front()) == 0);
      pieces_.pop_front();
    }
    return true;
  }

  LineReader reader(std::size_t max_line_bytes) {
    return LineReader(read_fd_, max_line_bytes, [this] { return feed(); });
  }

 private:
  void close_write() {
    if (write_fd_ >= 0) ::close(write_fd_);
    write_fd_ = -1;
  }

  std::deque<std::string> pieces_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  int reads_ = 0;
};

// Every line until end of stream; oversized ones as "<oversized N>".
std::vector<std::string> drain(LineReader& reader) {
  std::vector<std::string> out;
  while (auto line = reader.next())
    out.push_back(line->oversized ? "<oversized " + std::to_string(line->bytes) + ">" : line->text);
  return out;
}

using Lines = std::vector<std::string>;

}  // namespace

TEST_CASE("lines arriving in one read are split at newlines", "[rpc][framing]") {
  PipeFeed feed({"one\ntwo\nthree\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"one", "two", "three"});
}

TEST_CASE("a line split across reads is joined", "[rpc][framing]") {
  PipeFeed feed({"{\"a\":", "1}\n{\"b\"", ":2}\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"{\"a\":1}", "{\"b\":2}"});
  CHECK(feed.reads() >= 3);
}

TEST_CASE("a newline early in a later read is found after the buffer is compacted", "[rpc][framing]") {
  // The first line is consumed, the buffer is compacted before the next read,
  // and the newline of the second line lies in the first bytes of that read.
  PipeFeed feed({"first-line-long\nab", "c\nxy", "z\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"first-line-long", "abc", "xyz"});
}

TEST_CASE("one line per read, each shorter than the one before", "[rpc][framing]") {
  PipeFeed feed({"a long first message\n", "short\n", "x\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"a long first message", "short", "x"});
}

TEST_CASE("CRLF line endings lose their carriage return", "[rpc][framing]") {
  PipeFeed feed({"one\r\ntwo\r", "\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"one", "two"});
}

TEST_CASE("empty lines are skipped", "[rpc][framing]") {
  PipeFeed feed({"\n\r\n\nfirst\n\n", "\n\r\nsecond\n\n"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"first", "second"});
}

TEST_CASE("an oversized line is reported with its byte count and the next line is still read",
          "[rpc][framing]") {
  SECTION("within one read") {
    PipeFeed feed({std::string(100, 'x') + "\nafter\n"});
    auto reader = feed.reader(16);
    auto line = reader.next();
    REQUIRE(line);
    CHECK(line->oversized);
    CHECK(line->bytes == 100);
    CHECK(line->text.empty());
    CHECK(drain(reader) == Lines{"after"});
  }
  SECTION("spread over several reads") {
    PipeFeed feed({"before\n" + std::string(40, 'x'), std::string(30, 'y'), std::string(30, 'z') + "\nafter\n"});
    auto reader = feed.reader(16);
    CHECK(drain(reader) == Lines{"before", "<oversized 100>", "after"});
  }
  SECTION("a line of exactly the limit is not oversized") {
    PipeFeed feed({std::string(16, 'x') + "\n" + std::string(17, 'y') + "\n"});
    auto reader = feed.reader(16);
    CHECK(drain(reader) == Lines{std::string(16, 'x'), "<oversized 17>"});
  }
  SECTION("at the end of the stream without a newline") {
    PipeFeed feed({"ok\n" + std::string(50, 'x'), std::string(50, 'x')});
    auto reader = feed.reader(16);
    CHECK(drain(reader) == Lines{"ok", "<oversized 100>"});
  }
}

TEST_CASE("a last line without a newline still counts", "[rpc][framing]") {
  PipeFeed feed({"one\nlast"});
  auto reader = feed.reader(1024);
  CHECK(drain(reader) == Lines{"one", "last"});
}

TEST_CASE("end of stream gives nullopt, and keeps giving it", "[rpc][framing]") {
  PipeFeed feed({});
  auto reader = feed.reader(1024);
  CHECK_FALSE(reader.next());
  CHECK_FALSE(reader.next());
  CHECK(reader.last_error() == 0);
}

TEST_CASE("before_read returning false ends the stream without reading", "[rpc][framing]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  // Data is waiting, but the hook says stop: the reader must not even read it.
  REQUIRE(agentbox::rpc::write_all(fds[1], "waiting\n") == 0);
  int calls = 0;
  LineReader reader(fds[0], 1024, [&calls] {
    ++calls;
    return false;
  });
  CHECK_FALSE(reader.next());
  CHECK(calls == 1);
  char byte;
  CHECK(::read(fds[0], &byte, 1) == 1);  // still in the pipe
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("before_read returning false after some lines stops at that point", "[rpc][framing]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  int calls = 0;
  LineReader reader(fds[0], 1024, [&] {
    if (++calls > 1) return false;
    REQUIRE(agentbox::rpc::write_all(fds[1], "one\ntw") == 0);
    return true;
  });
  CHECK(drain(reader) == Lines{"one", "tw"});
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("a read error ends the stream and is kept in last_error", "[rpc][framing]") {
  LineReader reader(-1, 1024);
  CHECK_FALSE(reader.next());
  CHECK(reader.last_error() == EBADF);
}

TEST_CASE("LineWriter appends a newline and closes on a broken pipe", "[rpc][framing]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  LineWriter writer(fds[1]);
  CHECK(writer.write_line("{\"a\":1}"));
  CHECK_FALSE(writer.closed());
  char buffer[64] = {};
  CHECK(::read(fds[0], buffer, sizeof buffer) == 8);
  CHECK(std::string(buffer) == "{\"a\":1}\n");

  ::close(fds[0]);
  // Writing to a pipe without a reader raises SIGPIPE; the server ignores it,
  // so do the same here for the duration of the write.
  auto old = ::signal(SIGPIPE, SIG_IGN);
  CHECK_FALSE(writer.write_line("lost"));
  CHECK(writer.closed());
  CHECK_FALSE(writer.write_line("also lost"));
  ::signal(SIGPIPE, old);
  ::close(fds[1]);
}

TEST_CASE("write_all writes data larger than the pipe buffer", "[rpc][framing]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string big(256 * 1024, 'q');
  big.back() = '\n';
  int result = -1;
  std::thread writer([&] {
    result = agentbox::rpc::write_all(fds[1], big);
    ::close(fds[1]);
  });
  LineReader reader(fds[0], big.size());
  auto line = reader.next();
  writer.join();
  REQUIRE(line);
  CHECK_FALSE(line->oversized);
  CHECK(line->bytes == big.size() - 1);
  CHECK(line->text == big.substr(0, big.size() - 1));
  CHECK(result == 0);
  ::close(fds[0]);
}
