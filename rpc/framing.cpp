#include "rpc/framing.h"

#include <algorithm>
#include <cerrno>
#include <sys/uio.h>
#include <unistd.h>

namespace agentbox::rpc {

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
}

LineReader::LineReader(int fd, std::size_t max_line_bytes, std::function<bool()> before_read)
    : fd_(fd), max_(max_line_bytes), before_read_(std::move(before_read)) {}

bool LineReader::fill() {
  if (eof_) return false;
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  if (before_read_ && !before_read_()) {
    eof_ = true;
    return false;
  }
  std::size_t old = buffer_.size();
  buffer_.resize(old + kReadChunk);
  ssize_t n;
  do {
    n = ::read(fd_, buffer_.data() + old, kReadChunk);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    buffer_.resize(old);
    if (n < 0) last_errno_ = errno;
    eof_ = true;
    return false;
  }
  buffer_.resize(old + static_cast<std::size_t>(n));
  return true;
}

std::optional<LineReader::Line> LineReader::next() {
  for (;;) {
    // Bytes after start_ already searched; kept relative because fill() may
    // compact the buffer and move start_.
    std::size_t scanned = 0;
    std::size_t newline;
    bool oversized = false;
    std::size_t dropped = 0;
    for (;;) {
      newline = buffer_.find('\n', start_ + scanned);
      if (newline != std::string::npos) break;
      if (buffer_.size() - start_ > max_) {
        // Too long to keep: remember how much we dropped and keep scanning for
        // the end of this line without holding it in memory.
        oversized = true;
        dropped += buffer_.size() - start_;
        buffer_.clear();
        start_ = 0;
      }
      scanned = buffer_.size() - start_;
      if (!fill()) {
        if (buffer_.size() == start_ && !oversized) return std::nullopt;
        // A last line without a newline still counts as a message.
        newline = buffer_.size();
        break;
      }
    }
    std::size_t length = newline - start_;
    Line line;
    line.bytes = dropped + length;
    line.oversized = oversized || length > max_;
    if (!line.oversized) {
      line.text.assign(buffer_, start_, length);
      if (!line.text.empty() && line.text.back() == '\r') line.text.pop_back();
    }
    start_ = newline < buffer_.size() ? newline + 1 : buffer_.size();
    if (line.oversized || !line.text.empty()) return line;
    if (eof_ && start_ >= buffer_.size()) return std::nullopt;
  }
}

int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

bool LineWriter::write_line(std::string_view line) {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  // The line and its newline in one writev: a message can be megabytes, not
  // worth copying to append one byte.
  iovec parts[2] = {{const_cast<char*>(line.data()), line.size()}, {const_cast<char*>("\n"), 1}};
  std::size_t total = line.size() + 1, done = 0;
  while (done < total) {
    ssize_t n = ::writev(fd_, parts, 2);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      closed_ = true;
      return false;
    }
    done += static_cast<std::size_t>(n);
    for (auto& part : parts) {
      std::size_t used = std::min(part.iov_len, static_cast<std::size_t>(n));
      part.iov_base = static_cast<char*>(part.iov_base) + used;
      part.iov_len -= used;
      n -= static_cast<ssize_t>(used);
    }
  }
  return true;
}

bool LineWriter::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

}  // namespace agentbox::rpc
