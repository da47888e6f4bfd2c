// Bytes moved from one TCP socket to another through a pipe with splice(2):
// the kernel hands the socket's pages on, nothing is copied into the proxy.
// Used where the proxy only passes bytes on: a CONNECT tunnel, and a plain
// HTTP body whose framing the proxy does not change (a Content-Length body,
// or a response ended by the origin's close). A chunked body still goes
// through Beast, which must read its framing. Measured by
// bench/network_bench.mjs (docs/benchmarks.md, "Network proxy").
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

namespace agentbox::network {

struct SpliceLimits {
  // Bytes to move; nullopt: until the end of `from` (its end is then not an error).
  std::optional<std::uint64_t> count;
  // The longest wait for either socket; zero: no limit (the caller watches).
  std::chrono::steady_clock::duration wait{};
  // Set to now whenever bytes move (a tunnel's idle watch); may be null.
  std::chrono::steady_clock::time_point* moved = nullptr;
};

struct SpliceResult {
  boost::system::error_code error;
  bool reading = false;  // the error is `from`'s (or its end before the count), not `to`'s
};

// Moves bytes until the count is reached or `from` ends. Errors: the end
// of `from` before the count (boost::asio::error::eof), a wait longer than
// limits.wait (boost::beast::error::timeout), or the socket's or pipe's own.
// A closed socket makes a pending wait fail at once. The process must ignore
// SIGPIPE (splice takes no MSG_NOSIGNAL; the Proxy's constructor sees to it).
boost::asio::awaitable<SpliceResult> splice_bytes(boost::asio::ip::tcp::socket& from, boost::asio::ip::tcp::socket& to,
                                                  SpliceLimits limits);

// For a socket whose peer is on this machine (a box's side of the proxy,
// both sides of an exposed port's relay): CUBIC instead of the system's
// congestion control. BBR, a common default (this machine's), paces a
// loopback hop as if it crossed a network; measured here a 1 GB download
// through the proxy ran at a third of CUBIC's speed (bench/network_bench.mjs).
// Best effort: a kernel without CUBIC keeps its default.
void loopback_congestion_control(boost::asio::ip::tcp::socket& socket);

}  // namespace agentbox::network
