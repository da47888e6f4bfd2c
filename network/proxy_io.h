// One connection from a box to its proxy (proxy.h): plain HTTP requests
// forwarded to their origin, or one CONNECT tunnel (proxy_http.cpp). Runs
// on the proxy's I/O thread.
#pragma once

#include "network/policy.h"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace agentbox::network {

struct Session {
  std::string sandbox;
  std::shared_ptr<const Policy> policy;
  // Records a denial for the sandbox (host, port, the sentence the 403 gives).
  std::function<void(const std::string& sandbox, const std::string& host, std::uint16_t port, const std::string& reason)>
      deny;
};

// Serves the connection until it closes or breaks the rules; never throws
// for what the box sends (it gets 400, 403, 502 or a closed connection).
boost::asio::awaitable<void> serve_connection(Session session, std::shared_ptr<boost::beast::tcp_stream> client);

}  // namespace agentbox::network
