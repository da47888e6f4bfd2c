#include "server/transport.h"

#include "rpc/json_parse.h"
#include "os/cpus.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::server {

Recorder::Recorder(const std::string& path) : out_(path, std::ios::out | std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot open record file " + path + ": " + std::strerror(errno));
}

void Recorder::write(const json& entry) {
  std::lock_guard lock(mutex_);
  out_ << rpc::serialize(entry) << '\n';
  out_.flush();
}

void Recorder::incoming(const std::string& line) {
  // A line nested too deep is kept as text: as a value it would overflow the
  // stack when written (docs/protocol.md, "Nesting depth").
  rpc::ParsedJson parsed = rpc::parse_json(line);
  if (!parsed.ok())
    write(json{{"in_raw", line}});
  else
    write(json{{"in", std::move(parsed.value)}});
}

void Recorder::oversized(std::size_t bytes) { write(json{{"in_oversized", bytes}}); }

void Recorder::outgoing(const json& message) { write(json{{"out", message}}); }

StdioTransport::StdioTransport(int in_fd, int out_fd, std::size_t max_line_bytes, Recorder* recorder,
                               std::chrono::microseconds spin)
    : in_fd_(in_fd),
      max_line_(max_line_bytes),
      spin_(spin),
      writer_(out_fd),
      out_fd_(out_fd),
      unread_(Unread::Unknown),
      recorder_(recorder) {
  struct stat st;
  if (::fstat(out_fd, &st) == 0) unread_ = S_ISFIFO(st.st_mode) ? Unread::Pipe : S_ISSOCK(st.st_mode) ? Unread::Socket : Unread::Unknown;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  // When stdout is a pipe, room for a whole file page (1 MiB): the reply is
  // written at once instead of in 64 KiB steps paced by the host's reads.
  // Best effort (not a pipe, or over /proc/sys/fs/pipe-max-size).
  ::fcntl(out_fd, F_SETPIPE_SZ, 1 << 20);
}

StdioTransport::~StdioTransport() { ::close(wake_fd_); }

void StdioTransport::send(const json& message) { send_serialized(message, rpc::serialize(message)); }

void StdioTransport::send_serialized(const json& message, std::string_view line) {
  if (recorder_) recorder_->outgoing(message);
  std::lock_guard lock(write_mutex_);
  if (!writer_.write_line(line)) spdlog::debug("stdout is closed; message dropped");
  written_ += line.size() + 1;
}

std::uint64_t StdioTransport::written() const { return written_.load(); }

std::optional<bool> StdioTransport::read_up_to(std::uint64_t mark) const {
  if (unread_ == Unread::Unknown) return std::nullopt;
  std::uint64_t written_now = written();
  int unread = 0;
  if (::ioctl(out_fd_, unread_ == Unread::Pipe ? FIONREAD : SIOCOUTQ, &unread) != 0) return std::nullopt;
  // SIOCOUTQ counts buffer overhead too, so this errs on the side of waiting.
  return static_cast<std::uint64_t>(std::max(unread, 0)) <= written_now - std::min(mark, written_now);
}

void StdioTransport::stop() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

namespace {

using Clock = std::chrono::steady_clock;

// Waits until stdin is readable or stop() was called (false then). Poll before
// each read so stop() (SIGTERM) can interrupt a blocked read.
//
// In a burst of requests (the last one came within `spin` of the wait
// starting), it first polls without sleeping for up to `spin`: a request
// that arrives then is read at once, instead of after the wake-up of a
// sleeping thread, which on a virtual machine costs the host's client tens
// of microseconds per call (docs/files.md, "Small files: the call path").
// Between calls further apart, as an agent host makes them, it never spins;
// at the end of a burst it spins once in vain. (A sched_yield() per turn
// cost ~15 µs per call here; the scheduler preempts a spinner that others
// wait for anyway.) With one CPU spinning would only delay the client, so
// it is off.
class InputWaiter {
 public:
  InputWaiter(int in, int wake, std::chrono::microseconds spin)
      : fds_{{in, POLLIN, 0}, {wake, POLLIN, 0}}, spin_(os::usable_cpus() > 1 ? spin : std::chrono::microseconds(0)) {}

  bool wait() {
    auto start = Clock::now();
    if (burst_ && spin_.count() > 0) {
      do {
        if (int n = ::poll(fds_, 2, 0); n > 0) return !fds_[1].revents;
      } while (Clock::now() - start < spin_);
    }
    for (;;) {
      int n = ::poll(fds_, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      burst_ = Clock::now() - start < spin_;
      return !fds_[1].revents;  // readable, hung up or error: read() will tell
    }
  }

 private:
  pollfd fds_[2];
  std::chrono::microseconds spin_;
  bool burst_ = false;
};

}  // namespace

void StdioTransport::run(Dispatcher& dispatcher) {
  InputWaiter waiter(in_fd_, wake_fd_, spin_);
  rpc::LineReader reader(in_fd_, max_line_, [&waiter] { return waiter.wait(); });
  while (auto line = reader.next()) {
    if (line->oversized) {
      if (recorder_) recorder_->oversized(line->bytes);
      dispatcher.handle_oversized(line->bytes, max_line_);
      continue;
    }
    if (recorder_) recorder_->incoming(line->text);
    dispatcher.handle_line(line->text);
  }
  if (reader.last_error()) spdlog::warn("reading stdin failed: {}", std::strerror(reader.last_error()));
}

}  // namespace agentbox::server
