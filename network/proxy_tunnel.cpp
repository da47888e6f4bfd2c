// A CONNECT tunnel (proxy.h): the target checked and connected, the first
// TLS record read until OpenSSL has the ClientHello (tls_hello.h), its
// server name held against the CONNECT host, then bytes relayed both ways
// untouched (spliced), each half-close passed on, until both sides are done
// or nothing has moved for kTunnelIdle. A host with a secret is not
// connected here but intercepted once its hello has passed the same check
// (proxy_intercept.cpp). A tunnel that starts with HTTP instead of TLS
// carries plain HTTP requests for the CONNECT host (plain_in_tunnel).
#include "network/proxy_io.h"
#include "network/splice.h"
#include "network/tls_hello.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

namespace agentbox::network {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kHelloLimit = 16 * 1024 + 5;  // one TLS record, header included
constexpr auto kHelloWait = 10s;
constexpr auto kTunnelIdle = 600s;

// One direction, spliced (splice.h). At the end of `from` (or its failure)
// the end is passed on to `to` (a half-close: the other direction goes on);
// a failed write ends both.
asio::awaitable<void> pump(Link& link, tcp::socket& from, tcp::socket& to, Clock::time_point& last_moved) {
  auto moved = co_await splice_bytes(from, to, SpliceLimits{std::nullopt, Clock::duration::zero(), &last_moved});
  if (moved.error && !moved.reading) {
    link.close();
    co_return;
  }
  boost::system::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

// Returns once nothing has moved either way for kTunnelIdle (or when
// cancelled because the relay ended).
asio::awaitable<void> idle(const Clock::time_point& last_moved) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const auto deadline = last_moved + kTunnelIdle;
    if (Clock::now() >= deadline) co_return;
    timer.expires_at(deadline);
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) co_return;
  }
}

// Reads until OpenSSL has the whole ClientHello, or the bytes are not one.
// nullopt when the client went away first.
asio::awaitable<std::optional<ClientHello>> read_hello(Link& link, std::string& hello) {
  std::vector<char> chunk(4096);
  link.client.expires_after(kHelloWait);
  for (;;) {
    ClientHello read = read_client_hello(hello);
    if (read.state != ClientHello::State::NeedMore) co_return read;
    if (hello.size() >= kHelloLimit) co_return ClientHello{ClientHello::State::NotTls, std::nullopt};
    auto [ec, n] = co_await link.client.async_read_some(
        asio::buffer(chunk.data(), std::min(chunk.size(), kHelloLimit - hello.size())), kTuple);
    if (ec) co_return std::nullopt;
    hello.append(chunk.data(), n);
  }
}

// Why the tunnel must close, or "" when the hello names the CONNECT host. A
// client names no server only for an IP literal, which only an allow entry
// naming that address lets through.
std::string mismatch(const ClientHello& read, const Target& target, const std::string& host) {
  if (!read.server_name)
    return Policy::is_ip_literal(host) ? "" : "the TLS client named no server (SNI) for CONNECT " + where(target) + " (tunnel closed)";
  if (Policy::normalise_host(*read.server_name) != host)
    return "TLS server name '" + read.server_name->substr(0, 253) + "' does not match CONNECT host '" + host +
           "' (tunnel closed)";
  return "";
}

// Plain HTTP inside the tunnel (undici's proxy agent, and so Node's fetch,
// sends http:// this way): `first` holds what the client sent after the
// 200. Each request must name the CONNECT host and port; it is forwarded as
// a plain HTTP one is (exchange: the same header processing, the host's
// secret if it has one) over an origin connection of its own, the one the
// tunnel made for the first. Bytes that are neither TLS nor HTTP close the
// tunnel before any goes upstream.
asio::awaitable<void> plain_in_tunnel(const Session& s, Link& link, const Target& named, const std::string& first) {
  beast::flat_buffer buffer;
  buffer.reserve(std::max(kReadReserve, first.size()));
  buffer.commit(asio::buffer_copy(buffer.prepare(first.size()), asio::buffer(first)));
  std::vector<char> chunk(kBodyChunk);
  for (bool first_request = true;; first_request = false) {
    RequestParser parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);
    link.client.expires_after(first_request ? kHelloWait : kRequestWait);
    auto [ec, n] = co_await http::async_read_header(link.client, buffer, parser, kTuple);
    if (link.closed) co_return;
    if (ec && first_request && ec != http::error::end_of_stream && ec != asio::error::eof) {
      s.deny(s.sandbox, named.host, named.port,
             "the tunnel to " + where(named) +
                 " started with neither a TLS ClientHello nor an HTTP request (tunnel closed)");
      co_return;
    }
    if (client_ended(ec)) co_return;
    if (ec) {
      co_await respond(link,
                       ec == http::error::header_limit ? http::status::request_header_fields_too_large
                                                       : http::status::bad_request,
                       "agentbox network proxy: not a valid HTTP request: " + ec.message());
      co_return;
    }
    spdlog::debug("sandbox {}: {} http://{}{} (in a tunnel)", s.sandbox, std::string(parser.get().method_string()),
                  where(named), std::string(parser.get().target().substr(0, 200)));
    if (std::string why = out_of_place(parser.get(), named, 80, "the tunnel to"); !why.empty()) {
      s.deny(s.sandbox, named.host, named.port, why);
      co_await respond(link, http::status::forbidden, "agentbox network policy: " + why);
      co_return;
    }
    if (!link.upstream.socket().is_open()) {
      if (auto refused = co_await connect_upstream(s, named, link)) {
        co_await respond(link, refused->status, refused->text);
        co_return;
      }
    }
    const bool keep = co_await exchange(s, link, link.client, buffer, parser, link.upstream, named, 80, chunk);
    link.upstream.close();
    if (!keep) co_return;
  }
}

}  // namespace

asio::awaitable<void> tunnel(const Session& s, Link& link, boost::beast::flat_buffer& buffer, std::string_view authority) {
  auto target = split_authority(authority, 0);
  if (!target || target->port == 0) {
    co_await respond(link, http::status::bad_request,
                     "agentbox network proxy: CONNECT needs host:port, not '" + std::string(authority.substr(0, 200)) + "'");
    co_return;
  }
  if (auto denied = refused_by_policy(s, *target)) {
    co_await respond(link, http::status::forbidden, *denied);
    co_return;
  }
  const std::string host = Policy::normalise_host(target->host);
  // A host with a secret is intercepted when there is a CA: each request
  // inside makes its own origin connection, so none is made here.
  const bool intercepted = s.interceptor && s.policy->secret_for(host);
  if (!intercepted) {
    if (auto refused = co_await connect_upstream(s, *target, link)) {
      co_await respond(link, refused->status, refused->text);
      co_return;
    }
  }
  link.client.expires_after(kHelloWait);
  auto [wec, wn] = co_await asio::async_write(
      link.client, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")), kTuple);
  if (wec) co_return;

  // Bytes the client sent right after its request are the hello's start.
  std::string hello(static_cast<const char*>(buffer.data().data()), buffer.size());
  buffer.consume(buffer.size());
  auto read = co_await read_hello(link, hello);
  if (!read) co_return;  // the client gave up: nothing went upstream
  if (read->state == ClientHello::State::NotTls) {
    const Target named{host, target->port, {}};
    co_await plain_in_tunnel(s, link, named, hello);
    co_return;
  }
  if (std::string why = mismatch(*read, *target, host); !why.empty()) {
    s.deny(s.sandbox, host, target->port, why);
    co_return;  // closed before a byte went upstream
  }
  if (intercepted) {
    // A named Target, not a temporary: GCC 12 destroys a temporary in a
    // co_await's arguments twice.
    const Target named{host, target->port, {}};
    co_await intercept(s, link, named, std::move(hello));
    co_return;
  }

  link.upstream.expires_after(kHelloWait);
  auto [uec, un] = co_await asio::async_write(link.upstream, asio::buffer(hello), kTuple);
  if (uec) co_return;
  // From here the sockets are used directly: the relay's deadline is the
  // idle watch, not a deadline per read.
  link.client.expires_never();
  link.upstream.expires_never();
  Clock::time_point last_moved = Clock::now();
  tcp::socket& client = link.client.socket();
  tcp::socket& upstream = link.upstream.socket();
  co_await ((pump(link, client, upstream, last_moved) && pump(link, upstream, client, last_moved)) || idle(last_moved));
}

}  // namespace agentbox::network
