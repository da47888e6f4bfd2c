// One connection from a box to its proxy (proxy.h): plain HTTP requests
// forwarded to their origin, or one CONNECT tunnel (proxy_http.cpp,
// proxy_tunnel.cpp). Runs on the proxy's I/O thread; nothing here is
// thread-safe.
#pragma once

#include "network/policy.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/status.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace agentbox::network {

struct Session {
  std::string sandbox;
  std::shared_ptr<const Policy> policy;
  // Records a denial for the sandbox (host, port, the sentence the 403 gives).
  std::function<void(const std::string& sandbox, const std::string& host, std::uint16_t port, const std::string& reason)>
      deny;
};

// The box's connection and everything that works for it. close() (detach,
// the proxy's end) makes whatever the connection awaits fail at once, the
// origin's side included, so no coroutine outlives its box for long.
struct Link {
  explicit Link(boost::asio::ip::tcp::socket socket)
      : client(std::move(socket)), upstream(client.get_executor()), resolver(client.get_executor()) {}
  void close() {
    closed = true;
    resolver.cancel();
    client.close();
    upstream.close();
  }

  boost::beast::tcp_stream client;
  boost::beast::tcp_stream upstream;  // reopened by each connect
  boost::asio::ip::tcp::resolver resolver;
  bool closed = false;  // once set, nothing connects again
};

// Serves the connection until it closes or breaks the rules; never throws
// for what the box sends (it gets 400, 403, 502 or a closed connection).
boost::asio::awaitable<void> serve_connection(Session session, std::shared_ptr<Link> link);

// ---- shared by proxy_http.cpp and proxy_tunnel.cpp ----

struct Target {
  std::string host;  // as written, brackets removed
  std::uint16_t port = 0;
  std::string path;  // origin form (plain HTTP only)
};

// "host", "host:port", "[v6]", "[v6]:port"; nullopt when malformed.
std::optional<Target> split_authority(std::string_view authority, std::uint16_t default_port);
std::string where(const Target& target);  // "host:port", "[v6]:port"

// Checks the target against the policy; a denial is recorded and its
// sentence (the 403's body) returned.
std::optional<std::string> refused_by_policy(const Session& s, const Target& target);

struct Refusal {
  boost::beast::http::status status = boost::beast::http::status::bad_gateway;
  std::string text;
};
// Resolves (the policy's pins first), checks every address against the
// deny entries (denials recorded), and connects link.upstream.
boost::asio::awaitable<std::optional<Refusal>> connect_upstream(const Session& s, const Target& target, Link& link);

// Answers with a text/plain sentence and Connection: close, then lets the
// client read it (see linger in proxy_http.cpp). The connection ends after.
boost::asio::awaitable<void> respond(Link& link, boost::beast::http::status status, const std::string& text);

// The CONNECT tunnel, once its request is read (proxy_tunnel.cpp); `buffer`
// holds whatever the client sent after the request.
boost::asio::awaitable<void> tunnel(const Session& s, Link& link, boost::beast::flat_buffer& buffer,
                                    std::string_view authority);

}  // namespace agentbox::network
