// Newline-delimited framing over file descriptors: one JSON message per line.
// This is the only code that reads or writes the byte streams of the MCP
// transport and of the server<->agent pipe.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace agentbox::rpc {

// Reads lines from a blocking fd. A line longer than the limit is not
// buffered: its bytes are counted and dropped up to the next newline, and it is
// reported as oversized so the caller can answer it and carry on.
class LineReader {
 public:
  struct Line {
    std::string text;      // without the trailing "\n" (and "\r")
    bool oversized = false;
    std::size_t bytes = 0;  // length of the line on the wire
  };

  // before_read, when set, is called before each read and may block until the
  // fd is readable; returning false ends the stream (used to stop a reader that
  // would otherwise sit in read()).
  LineReader(int fd, std::size_t max_line_bytes, std::function<bool()> before_read = {});

  // The next non-empty line, or nullopt at end of stream (or on a read error,
  // which is logged by the caller through last_error()).
  std::optional<Line> next();
  int last_error() const { return last_errno_; }

 private:
  bool fill();

  int fd_;
  std::size_t max_;
  std::function<bool()> before_read_;
  std::string buffer_;
  std::size_t start_ = 0;  // start of unconsumed data in buffer_
  bool eof_ = false;
  int last_errno_ = 0;
};

// Writes whole lines to an fd; safe to call from many threads. A write error
// (the reader went away) marks the writer closed; later writes are dropped.
class LineWriter {
 public:
  explicit LineWriter(int fd) : fd_(fd) {}
  // Appends "\n". Returns false when the stream is closed.
  bool write_line(std::string_view line);
  bool closed() const;

 private:
  int fd_;
  mutable std::mutex mutex_;
  bool closed_ = false;
};

// Writes all of data, retrying on EINTR and short writes. Returns errno or 0.
int write_all(int fd, std::string_view data);

}  // namespace agentbox::rpc
