// splice(2) between two sockets (splice.h), through a pipe filled and
// drained at once. Sockets and pipe are non-blocking; whatever has nothing
// to give, or no room, is waited for through Asio, so a relay never blocks
// the proxy's one I/O thread.
#include "network/splice.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/multiple_exceptions.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <limits>
#include <sys/ioctl.h>
#include <unistd.h>

namespace agentbox::network {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr int kPipeSize = 1 << 20;  // the default maximum of an unprivileged pipe (fs.pipe-max-size)
constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
using Duration = std::chrono::steady_clock::duration;

struct Failed {
  boost::system::error_code error;
  bool reading;
};

[[noreturn]] void fail(boost::system::error_code error, bool reading) { throw Failed{error, reading}; }
boost::system::error_code errno_code(int error) { return {error, boost::system::system_category()}; }

// Bytes waiting to be read in a socket or a pipe.
int readable_bytes(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

// Waits until `object` (a socket or a pipe's end) is ready for `what`;
// throws Failed when it is closed, or when `wait` (if not zero) passes first.
template <class Object, class WaitType>
asio::awaitable<void> ready(Object& object, WaitType what, Duration wait, bool reading) {
  if (wait == Duration::zero()) {
    auto [ec] = co_await object.async_wait(what, kTuple);
    if (ec) fail(ec, reading);
    co_return;
  }
  asio::steady_timer timer(object.get_executor(), wait);
  auto first = co_await (object.async_wait(what, kTuple) || timer.async_wait(kTuple));
  if (first.index() == 1) fail(boost::beast::error::timeout, reading);
  if (auto ec = std::get<0>(std::get<0>(first))) fail(ec, reading);
}

// `from` into the pipe until the count or `from`'s end; then the pipe's
// write end is closed, which the writer reads as the end. When a splice
// cannot go on, either `from` has nothing or the pipe is full: the socket's
// unread bytes say which to wait for.
asio::awaitable<void> fill(tcp::socket& from, asio::posix::stream_descriptor& pipe, const SpliceLimits& limits,
                           std::uint64_t& left) {
  while (left > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(left, kPipeSize));
    const ssize_t n = ::splice(from.native_handle(), nullptr, pipe.native_handle(), nullptr, want, kFlags);
    if (n > 0) {
      if (limits.count) left -= static_cast<std::uint64_t>(n);
      if (limits.moved) *limits.moved = std::chrono::steady_clock::now();
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN) {
      if (readable_bytes(from.native_handle()) > 0)
        co_await ready(pipe, asio::posix::stream_descriptor::wait_write, limits.wait, false);
      else
        co_await ready(from, tcp::socket::wait_read, limits.wait, true);
    } else if (errno != EINTR) {
      fail(errno_code(errno), true);
    }
  }
  pipe.close();
}

// The pipe into `to` until the pipe's end (the writer closed it, all read).
asio::awaitable<void> drain(asio::posix::stream_descriptor& pipe, tcp::socket& to, const SpliceLimits& limits) {
  for (;;) {
    const ssize_t n = ::splice(pipe.native_handle(), nullptr, to.native_handle(), nullptr, kPipeSize, kFlags);
    if (n > 0) {
      if (limits.moved) *limits.moved = std::chrono::steady_clock::now();
    } else if (n == 0) {
      co_return;
    } else if (errno == EAGAIN) {
      if (readable_bytes(pipe.native_handle()) > 0)
        co_await ready(to, tcp::socket::wait_write, limits.wait, false);
      else
        co_await ready(pipe, asio::posix::stream_descriptor::wait_read, limits.wait, false);
    } else if (errno != EINTR) {
      fail(errno_code(errno), false);
    }
  }
}

}  // namespace

asio::awaitable<SpliceResult> splice_bytes(tcp::socket& from, tcp::socket& to, SpliceLimits limits) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) co_return SpliceResult{errno_code(errno), false};
  auto executor = co_await asio::this_coro::executor;
  asio::posix::stream_descriptor read_end(executor, fds[0]), write_end(executor, fds[1]);
  (void)fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);  // a smaller pipe only means more calls

  boost::system::error_code ec;
  from.native_non_blocking(true, ec);
  if (!ec) to.native_non_blocking(true, ec);
  if (ec) co_return SpliceResult{ec, false};

  std::uint64_t left = limits.count.value_or(std::numeric_limits<std::uint64_t>::max());
  // Both directions of the pipe at once, so the origin is read while the
  // box is written; the first to fail cancels the other.
  std::exception_ptr failure;
  try {
    co_await (fill(from, write_end, limits, left) && drain(read_end, to, limits));
  } catch (const asio::multiple_exceptions& both) {  // each failed, the first is the cause
    failure = both.first_exception();
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Failed& failed) {
      co_return SpliceResult{failed.error, failed.reading};
    }
  }
  if (limits.count && left > 0) co_return SpliceResult{asio::error::eof, true};
  co_return SpliceResult{};
}

void loopback_congestion_control(boost::asio::ip::tcp::socket& socket) {
  static constexpr char kCubic[] = "cubic";
  (void)setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_CONGESTION, kCubic, sizeof kCubic - 1);
}

}  // namespace agentbox::network
