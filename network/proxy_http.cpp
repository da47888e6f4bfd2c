// What the proxy does with one connection from a box (docs/network.md, "What
// the proxy does with a request"). Everything the box sends is an attacker's
// input: Beast parses it with bounded headers, every read has a deadline,
// bodies stream through a fixed buffer, and anything the proxy does not
// understand ends in a 4xx or a closed connection, never a throw.
#include "network/proxy_io.h"
#include "network/tls_hello.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <charconv>
#include <optional>
#include <vector>

namespace agentbox::network {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::size_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kBodyChunk = 256 * 1024;
constexpr std::size_t kHelloLimit = 16 * 1024 + 5;  // one TLS record
constexpr auto kRequestWait = 120s;   // for the next request on a kept-alive connection
constexpr auto kConnectWait = 10s;
constexpr auto kIoWait = 300s;        // any single read or write of a request or response
constexpr auto kTunnelIdle = 600s;

struct Target {
  std::string host;  // as written, brackets removed
  std::uint16_t port = 0;
  std::string path;  // origin form
};

std::optional<std::uint16_t> parse_port(std::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

// "host", "host:port", "[v6]", "[v6]:port".
std::optional<Target> split_authority(std::string_view authority, std::uint16_t default_port) {
  Target t;
  t.port = default_port;
  if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    t.host = std::string(authority.substr(1, close - 1));
    auto rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      auto port = parse_port(rest.substr(1));
      if (!port) return std::nullopt;
      t.port = *port;
    }
  } else {
    auto colon = authority.rfind(':');
    t.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      if (authority.find(':') != colon) return std::nullopt;  // a bare IPv6 address needs brackets
      auto port = parse_port(authority.substr(colon + 1));
      if (!port) return std::nullopt;
      t.port = *port;
    }
  }
  if (t.host.empty()) return std::nullopt;
  return t;
}

// An absolute-form target, "http://host[:port]/path?query".
std::optional<Target> absolute_target(std::string_view target) {
  constexpr std::string_view scheme = "http://";
  if (target.size() < scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(target[i])) != scheme[i]) return std::nullopt;
  auto rest = target.substr(scheme.size());
  auto end = rest.find_first_of("/?#");
  auto t = split_authority(rest.substr(0, end), 80);
  if (!t) return std::nullopt;
  std::string_view path = end == std::string_view::npos ? "/" : rest.substr(end);
  if (auto hash = path.find('#'); hash != std::string_view::npos) path = path.substr(0, hash);
  t->path = path.empty() || path.front() != '/' ? "/" + std::string(path) : std::string(path);
  return t;
}

std::string where(const Target& t) {
  return (t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
}

// Removes the hop-by-hop headers (RFC 9110 section 7.6.1) and the proxy's own.
template <class Fields>
void drop_hop_by_hop(Fields& fields) {
  std::vector<std::string> listed;
  for (auto it = fields.find(http::field::connection); it != fields.end() && it->name() == http::field::connection; ++it) {
    std::string value(it->value());
    std::size_t start = 0;
    while (start <= value.size()) {
      auto comma = value.find(',', start);
      std::string token = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      token.erase(0, token.find_first_not_of(" \t"));
      token.erase(token.find_last_not_of(" \t") + 1);
      if (!token.empty()) listed.push_back(token);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const auto& name : listed) fields.erase(name);
  for (auto field : {http::field::connection, http::field::keep_alive, http::field::proxy_authorization,
                     http::field::proxy_connection, http::field::te, http::field::trailer, http::field::upgrade,
                     http::field::proxy_authenticate})
    fields.erase(field);
}

// The secret of this host (policy.h) set, and its placeholder replaced in
// this request's header values; other hosts' requests are never touched.
template <class Fields>
void add_secret(Fields& fields, const Secret& secret) {
  std::string placeholder = secret.placeholder();
  for (auto& field : fields) {
    std::string value(field.value());
    bool changed = false;
    for (auto at = value.find(placeholder); at != std::string::npos; at = value.find(placeholder, at + secret.value.size())) {
      value.replace(at, placeholder.size(), secret.value);
      changed = true;
    }
    if (changed) fields.set(field.name_string(), value);
  }
  fields.set(secret.header, secret.header_value());
}

asio::awaitable<void> respond(beast::tcp_stream& client, http::status status, const std::string& text) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.set(http::field::connection, "close");
  res.body() = text + "\n";
  res.prepare_payload();
  client.expires_after(10s);
  co_await http::async_write(client, res, kTuple);
}

struct Refusal {
  http::status status = http::status::bad_gateway;
  std::string text;
};

// Resolves (the policy's pins first), checks every address against the
// deny entries, and connects. Denials are recorded here.
asio::awaitable<std::optional<Refusal>> connect_upstream(const Session& s, const Target& t, beast::tcp_stream& upstream) {
  auto executor = co_await asio::this_coro::executor;
  std::vector<tcp::endpoint> endpoints;
  boost::system::error_code ec;
  std::string name = Policy::normalise_host(t.host);
  std::optional<std::string> pinned = s.policy->pinned(name);
  if (pinned || Policy::is_ip_literal(name)) {
    auto address = asio::ip::make_address(pinned ? *pinned : name, ec);
    if (ec) co_return Refusal{http::status::forbidden, "agentbox network policy: " + where(t) + " is not an address the proxy can reach"};
    endpoints.emplace_back(address, t.port);
  } else {
    tcp::resolver resolver(executor);
    auto [rec, results] = co_await resolver.async_resolve(name, std::to_string(t.port), kTuple);
    if (rec || results.empty())
      co_return Refusal{http::status::bad_gateway, "agentbox network proxy: cannot resolve " + name + ": " +
                                                       (rec ? rec.message() : std::string("no address"))};
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  for (const auto& endpoint : endpoints) {
    auto address = endpoint.address().to_string();
    Decision d = s.policy->check_address(address, name, t.port);
    if (!d.allowed) {
      s.deny(s.sandbox, name, t.port, d.reason);
      co_return Refusal{http::status::forbidden, "agentbox network policy: " + d.reason};
    }
  }
  upstream.expires_after(kConnectWait);
  auto [cec, reached] = co_await upstream.async_connect(endpoints, kTuple);
  if (cec)
    co_return Refusal{cec == beast::error::timeout ? http::status::gateway_timeout : http::status::bad_gateway,
                      "agentbox network proxy: cannot connect to " + where(t) + ": " + cec.message()};
  (void)reached;
  co_return std::nullopt;
}

// Checks the target against the policy; a denial is recorded and answered.
bool allowed(const Session& s, const Target& t, std::string& text) {
  Decision d = s.policy->check(t.host, t.port);
  if (d.allowed) return true;
  std::string host = Policy::normalise_host(t.host);
  s.deny(s.sandbox, host.empty() ? t.host : host, t.port, d.reason);
  text = "agentbox network policy: " + d.reason;
  return false;
}

// Moves a message's body from `in` to `out` through one buffer (Beast's relay).
template <bool isRequest>
asio::awaitable<boost::system::error_code> relay_body(beast::tcp_stream& in, beast::flat_buffer& buffer,
                                                      http::parser<isRequest, http::buffer_body>& parser,
                                                      http::serializer<isRequest, http::buffer_body>& serializer,
                                                      beast::tcp_stream& out, std::vector<char>& chunk) {
  out.expires_after(kIoWait);
  auto [hec, hn] = co_await http::async_write_header(out, serializer, kTuple);
  (void)hn;
  if (hec) co_return hec;
  do {
    auto& body = parser.get().body();
    if (!parser.is_done()) {
      body.data = chunk.data();
      body.size = chunk.size();
      in.expires_after(kIoWait);
      auto [rec, rn] = co_await http::async_read(in, buffer, parser, kTuple);
      (void)rn;
      if (rec == http::error::need_buffer) rec = {};
      if (rec) co_return rec;
      body.size = chunk.size() - body.size;
      body.data = chunk.data();
      body.more = !parser.is_done();
    } else {
      body.data = nullptr;
      body.size = 0;
    }
    out.expires_after(kIoWait);
    auto [wec, wn] = co_await http::async_write(out, serializer, kTuple);
    (void)wn;
    if (wec == http::error::need_buffer) wec = {};
    if (wec) co_return wec;
  } while (!parser.is_done() && !serializer.is_done());
  co_return boost::system::error_code{};
}

// One plain HTTP request, forwarded; false when the client connection ends.
asio::awaitable<bool> forward(const Session& s, beast::tcp_stream& client, beast::flat_buffer& buffer,
                              http::request_parser<http::buffer_body>& req_parser, std::vector<char>& chunk) {
  auto& req = req_parser.get();
  auto target = absolute_target(req.target());
  if (!target) {
    co_await respond(client, http::status::bad_request,
                     "agentbox network proxy: send requests as to a proxy (an absolute http:// URL), or CONNECT "
                     "host:port for HTTPS; this request's target is '" + std::string(req.target().substr(0, 200)) + "'");
    co_return false;
  }
  std::string text;
  if (!allowed(s, *target, text)) {
    co_await respond(client, http::status::forbidden, text);
    co_return false;
  }
  beast::tcp_stream upstream(co_await asio::this_coro::executor);
  if (auto refused = co_await connect_upstream(s, *target, upstream)) {
    co_await respond(client, refused->status, refused->text);
    co_return false;
  }
  bool client_keep = req.keep_alive();
  bool head = req.method() == http::verb::head;
  bool expect_continue = beast::iequals(req[http::field::expect], "100-continue");
  drop_hop_by_hop(req);
  req.erase(http::field::expect);
  req.target(target->path);
  std::string host_header = target->host.find(':') != std::string::npos ? "[" + target->host + "]" : target->host;
  if (target->port != 80) host_header += ":" + std::to_string(target->port);
  req.set(http::field::host, host_header);
  if (const Secret* secret = s.policy->secret_for(target->host)) add_secret(req, *secret);
  req.keep_alive(false);  // one upstream connection per request
  if (expect_continue) {
    client.expires_after(10s);
    auto [cec, cn] = co_await asio::async_write(client, asio::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), kTuple);
    (void)cn;
    if (cec) co_return false;
  }
  beast::flat_buffer up_buffer;
  http::request_serializer<http::buffer_body> req_serializer(req);
  if (auto ec = co_await relay_body<true>(client, buffer, req_parser, req_serializer, upstream, chunk)) {
    spdlog::debug("sandbox {}: request to {} cut: {}", s.sandbox, where(*target), ec.message());
    co_return false;
  }
  for (;;) {  // interim 1xx responses are read and dropped
    http::response_parser<http::buffer_body> res_parser;
    res_parser.header_limit(kHeaderLimit);
    res_parser.body_limit(boost::none);
    if (head) res_parser.skip(true);
    upstream.expires_after(kIoWait);
    auto [rec, rn] = co_await http::async_read_header(upstream, up_buffer, res_parser, kTuple);
    (void)rn;
    if (rec) {
      co_await respond(client, http::status::bad_gateway,
                       "agentbox network proxy: " + where(*target) + " sent no valid response: " + rec.message());
      co_return false;
    }
    auto& res = res_parser.get();
    if (res.result_int() >= 100 && res.result_int() < 200) continue;
    drop_hop_by_hop(res);
    bool keep = client_keep && !res.need_eof();
    res.keep_alive(keep);
    http::response_serializer<http::buffer_body> res_serializer(res);
    if (auto ec = co_await relay_body<false>(upstream, up_buffer, res_parser, res_serializer, client, chunk)) {
      spdlog::debug("sandbox {}: response from {} cut: {}", s.sandbox, where(*target), ec.message());
      co_return false;
    }
    co_return keep;
  }
}

asio::awaitable<void> pump(beast::tcp_stream& from, beast::tcp_stream& to, std::atomic<bool>& moved) {
  std::vector<char> buffer(kBodyChunk);
  for (;;) {
    auto [rec, n] = co_await from.socket().async_read_some(asio::buffer(buffer), kTuple);
    if (rec) {
      boost::system::error_code ignored;
      to.socket().shutdown(tcp::socket::shutdown_send, ignored);
      co_return;
    }
    moved = true;
    auto [wec, wn] = co_await asio::async_write(to.socket(), asio::buffer(buffer.data(), n), kTuple);
    (void)wn;
    if (wec) {
      boost::system::error_code ignored;
      from.socket().close(ignored);
      co_return;
    }
  }
}

// Closes both ends once nothing has moved for kTunnelIdle.
asio::awaitable<void> watch_idle(beast::tcp_stream& a, beast::tcp_stream& b, std::atomic<bool>& moved,
                                 std::shared_ptr<bool> over) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  auto idle = 0s;
  while (!*over) {
    timer.expires_after(10s);
    co_await timer.async_wait(kTuple);
    if (*over) co_return;
    idle = moved.exchange(false) ? 0s : idle + 10s;
    if (idle >= kTunnelIdle) {
      boost::system::error_code ignored;
      a.socket().close(ignored);
      b.socket().close(ignored);
      co_return;
    }
  }
}

asio::awaitable<void> tunnel(const Session& s, beast::tcp_stream& client, beast::flat_buffer& buffer,
                             std::string_view authority) {
  auto target = split_authority(authority, 0);
  if (!target || target->port == 0) {
    co_await respond(client, http::status::bad_request,
                     "agentbox network proxy: CONNECT needs host:port, not '" + std::string(authority.substr(0, 200)) + "'");
    co_return;
  }
  std::string text;
  if (!allowed(s, *target, text)) {
    co_await respond(client, http::status::forbidden, text);
    co_return;
  }
  beast::tcp_stream upstream(co_await asio::this_coro::executor);
  if (auto refused = co_await connect_upstream(s, *target, upstream)) {
    co_await respond(client, refused->status, refused->text);
    co_return;
  }
  client.expires_after(10s);
  auto [wec, wn] = co_await asio::async_write(client, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")), kTuple);
  (void)wn;
  if (wec) co_return;
  // The client's first bytes: a TLS ClientHello naming the CONNECT host.
  std::string hello(static_cast<const char*>(buffer.data().data()), buffer.size());
  buffer.consume(buffer.size());
  std::string host = Policy::normalise_host(target->host);
  ClientHello read;
  std::vector<char> chunk(4096);
  for (;;) {
    read = read_client_hello(hello);
    if (read.state != ClientHello::State::NeedMore) break;
    if (hello.size() >= kHelloLimit) {
      read.state = ClientHello::State::NotTls;
      break;
    }
    client.expires_after(kConnectWait);
    auto [rec, n] = co_await client.async_read_some(asio::buffer(chunk), kTuple);
    if (rec) co_return;  // the client gave up: nothing was sent upstream
    hello.append(chunk.data(), n);
  }
  std::string why;
  if (read.state == ClientHello::State::NotTls) {
    why = "the tunnel to " + where(*target) + " did not start with a TLS ClientHello (only TLS goes through CONNECT)";
  } else if (!read.server_name) {
    if (!Policy::is_ip_literal(host)) why = "the TLS client named no server for CONNECT " + where(*target);
  } else if (Policy::normalise_host(*read.server_name) != host) {
    why = "TLS server name '" + read.server_name->substr(0, 253) + "' does not match CONNECT host '" + host +
          "' (tunnel closed)";
  }
  if (!why.empty()) {
    s.deny(s.sandbox, host, target->port, why);
    co_return;  // closed before a byte went upstream
  }
  upstream.expires_after(kIoWait);
  auto [uec, un] = co_await asio::async_write(upstream.socket(), asio::buffer(hello), kTuple);
  (void)un;
  if (uec) co_return;
  client.expires_never();
  upstream.expires_never();
  std::atomic<bool> moved{true};
  auto over = std::make_shared<bool>(false);
  auto executor = co_await asio::this_coro::executor;
  asio::co_spawn(executor, watch_idle(client, upstream, moved, over), asio::detached);
  co_await (pump(client, upstream, moved) && pump(upstream, client, moved));
  *over = true;
}

}  // namespace

asio::awaitable<void> serve_connection(Session session, std::shared_ptr<beast::tcp_stream> client) {
  beast::flat_buffer buffer;
  std::vector<char> chunk(kBodyChunk);
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);
    client->expires_after(kRequestWait);
    auto [ec, n] = co_await http::async_read_header(*client, buffer, parser, kTuple);
    (void)n;
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset)
      co_return;
    if (ec) {
      co_await respond(*client, ec == http::error::header_limit ? http::status::request_header_fields_too_large
                                                                : http::status::bad_request,
                       "agentbox network proxy: not a valid HTTP request: " + ec.message());
      co_return;
    }
    if (parser.get().method() == http::verb::connect) {
      std::string authority(parser.get().target());
      co_await tunnel(session, *client, buffer, authority);
      co_return;
    }
    if (!co_await forward(session, *client, buffer, parser, chunk)) co_return;
  }
}

}  // namespace agentbox::network
