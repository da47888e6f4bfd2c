// One connection from a box to its proxy (proxy.h): plain HTTP requests
// forwarded to their origin, one CONNECT tunnel, or one intercepted TLS
// connection to a host that has a secret (proxy_http.cpp, proxy_tunnel.cpp,
// proxy_intercept.cpp). Runs on the proxy's I/O thread; nothing here is
// thread-safe.
#pragma once

#include "network/ca.h"
#include "network/policy.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentbox::network {

inline constexpr std::size_t kHeaderLimit = 64 * 1024;
inline constexpr std::size_t kBodyChunk = 256 * 1024;
// Beast sizes each read by the dynamic buffer's free capacity (at least 512
// bytes, at most 64 KiB): a buffer left at the header's size reads a body
// 512 bytes per system call, ten times slower than a direct download.
inline constexpr std::size_t kReadReserve = 64 * 1024;
inline constexpr std::chrono::seconds kRequestWait{120};  // for the next request on a kept-alive connection
inline constexpr std::chrono::seconds kConnectWait{10};   // a connect, a TLS handshake, a short answer

// TLS over a Link's socket (a reference: Link::close() still ends it).
using TlsStream = boost::asio::ssl::stream<boost::beast::tcp_stream&>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;

// The TLS contexts of interception (proxy_intercept.cpp): one server context
// per intercepted host, holding the CA's leaf for it (made on first use and
// kept: the hosts are the policy's secret hosts, a bounded set), and one
// client context for the origins, which trusts what OpenSSL's default paths
// name when the proxy starts (SSL_CERT_FILE and SSL_CERT_DIR honoured).
class Interceptor {
 public:
  explicit Interceptor(std::shared_ptr<CertificateAuthority> ca);  // throws std::runtime_error
  boost::asio::ssl::context& server_for(const std::string& host);  // throws CaError, std::system_error
  boost::asio::ssl::context& client() { return client_; }
  const std::shared_ptr<CertificateAuthority>& authority() const { return ca_; }

 private:
  std::shared_ptr<CertificateAuthority> ca_;
  boost::asio::ssl::context client_;
  std::map<std::string, std::unique_ptr<boost::asio::ssl::context>> servers_;
};

struct Session {
  std::string sandbox;
  std::shared_ptr<const Policy> policy;
  Interceptor* interceptor = nullptr;  // null: no CA, every CONNECT is tunnelled untouched
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
// `client` is link.client or TLS over it.
template <class Client>
boost::asio::awaitable<void> respond(Link& link, Client& client, boost::beast::http::status status,
                                     const std::string& text);
boost::asio::awaitable<void> respond(Link& link, boost::beast::http::status status, const std::string& text);

// The ends of a connection that are the client's doing (it left, or went
// quiet past the wait), not an error to answer.
bool client_ended(const boost::system::error_code& ec);

// Why a request read inside a tunnel to `named` may not go, or "": its
// target must be a path and its Host the tunnel's host and port (`inside`
// names the tunnel in the sentence: "the TLS connection to").
std::string out_of_place(const boost::beast::http::request_header<>& req, const Target& named,
                         std::uint16_t default_port, std::string_view inside);

// The Host field for a target: "host" on the scheme's default port, else "host:port".
std::string host_field(const Target& target, std::uint16_t default_port);

// Sends the request whose header `parser` has read from `client` to the
// origin on `upstream` (connected; for HTTPS past its handshake) and streams
// the answer back: hop-by-hop headers removed, Host set to `named` (the
// name as the policy saw it: lower case, no trailing dot), and when `named`
// has a secret, its header set and its placeholder replaced. The target is
// left as the caller set it. True when the client connection may carry
// another request. Instantiated in proxy_http.cpp for plain HTTP (both
// tcp_stream) and interception (both TlsStream).
template <class Client, class Upstream>
boost::asio::awaitable<bool> exchange(const Session& s, Link& link, Client& client, boost::beast::flat_buffer& buffer,
                                      RequestParser& parser, Upstream& upstream, const Target& named,
                                      std::uint16_t default_port, std::vector<char>& chunk);

// The CONNECT tunnel, once its request is read (proxy_tunnel.cpp); `buffer`
// holds whatever the client sent after the request. A tunnel that starts
// with an HTTP request instead of TLS carries plain HTTP, each request
// served as a plain HTTP one is, for the CONNECT host only.
boost::asio::awaitable<void> tunnel(const Session& s, Link& link, boost::beast::flat_buffer& buffer,
                                    std::string_view authority);

// An intercepted CONNECT (proxy_intercept.cpp), once it is answered 200 and
// `hello` (everything the client sent since) holds a ClientHello naming
// `named`: TLS ended here with the CA's leaf, then each request forwarded
// over its own TLS connection to the origin, its certificate verified.
boost::asio::awaitable<void> intercept(const Session& s, Link& link, const Target& named, std::string hello);

}  // namespace agentbox::network
