// What the proxy does with one connection from a box (docs/network.md, "What
// the proxy does with a request"). Everything the box sends is an attacker's
// input: Beast parses it with bounded headers, every read has a deadline,
// bodies stream through a fixed buffer, and anything the proxy does not
// understand ends in a 4xx or a closed connection, never a throw.
#include "network/proxy_io.h"
#include "network/splice.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <charconv>
#include <set>
#include <type_traits>
#include <vector>

namespace agentbox::network {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kIoWait = 300s;       // any single read or write of a request or response
constexpr auto kLinger = 2s;
constexpr std::size_t kLingerLimit = 1 << 20;

std::optional<std::uint16_t> parse_port(std::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

std::string lower_case(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_http(std::string_view target) {
  constexpr std::string_view scheme = "http://";
  return target.size() >= scheme.size() && beast::iequals(target.substr(0, scheme.size()), scheme);
}

// An absolute-form target, "http://host[:port]/path?query".
std::optional<Target> absolute_target(std::string_view target) {
  if (!starts_with_http(target)) return std::nullopt;
  auto rest = target.substr(std::string_view("http://").size());
  auto end = rest.find_first_of("/?#");
  auto t = split_authority(rest.substr(0, end), 80);
  if (!t) return std::nullopt;
  std::string_view path = end == std::string_view::npos ? "/" : rest.substr(end);
  if (auto hash = path.find('#'); hash != std::string_view::npos) path = path.substr(0, hash);
  t->path = path.empty() || path.front() != '/' ? "/" + std::string(path) : std::string(path);
  return t;
}

// The 400's sentence for a request that is not in absolute form.
std::string not_absolute(std::string_view target) {
  const std::string shown(target.substr(0, 200));
  if (starts_with_http(target))
    return "agentbox network proxy: the URL '" + shown +
           "' does not name a host[:port] the proxy can use (no user:password@, IPv6 in brackets)";
  return "agentbox network proxy: this is a proxy; send requests to it as to a proxy (an absolute http://host/path "
         "URL, as curl -x and HTTP_PROXY do), or CONNECT host:port for HTTPS; this request's target is '" + shown + "'";
}

// Removes the hop-by-hop headers (RFC 9110 section 7.6.1) and the proxy's
// own. A Connection header may name others, but never the ones that frame
// the message or name its host: the proxy relies on those.
template <class Fields>
void drop_hop_by_hop(Fields& fields) {
  std::vector<std::string> listed;
  for (auto it = fields.find(http::field::connection); it != fields.end() && it->name() == http::field::connection; ++it) {
    std::string_view value = it->value();
    while (!value.empty()) {
      auto comma = value.find(',');
      std::string_view token = value.substr(0, comma);
      value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
      if (!token.empty()) listed.emplace_back(token);
    }
  }
  for (const auto& name : listed)
    if (!beast::iequals(name, "content-length") && !beast::iequals(name, "transfer-encoding") &&
        !beast::iequals(name, "host"))
      fields.erase(name);
  for (auto field : {http::field::connection, http::field::keep_alive, http::field::proxy_authorization,
                     http::field::proxy_connection, http::field::te, http::field::trailer, http::field::upgrade,
                     http::field::proxy_authenticate})
    fields.erase(field);
}

// The secret of this host (policy.h) set, and its placeholder replaced in
// this request's header values; other hosts' requests are never touched.
template <class Fields>
void add_secret(Fields& fields, const Secret& secret) {
  const std::string placeholder = secret.placeholder();
  // Read first and rewritten after: erasing or setting a field while
  // iterating the fields frees the one the iterator stands on.
  struct Entry {
    std::string name, value;
  };
  std::vector<Entry> entries;
  std::set<std::string> rewritten;  // lower case
  for (const auto& field : fields) {
    Entry entry{std::string(field.name_string()), std::string(field.value())};
    bool changed = false;
    for (auto at = entry.value.find(placeholder); at != std::string::npos;
         at = entry.value.find(placeholder, at + secret.value.size())) {
      entry.value.replace(at, placeholder.size(), secret.value);
      changed = true;
    }
    if (changed) rewritten.insert(lower_case(entry.name));
    entries.push_back(std::move(entry));
  }
  for (const auto& name : rewritten) fields.erase(name);
  for (const auto& entry : entries)
    if (rewritten.count(lower_case(entry.name))) fields.insert(entry.name, entry.value);  // same-name order kept
  fields.set(secret.header, secret.header_value());
}

// Closing a socket with unread input sends a reset, and a client still
// sending (say, the body of a request that was refused) may then lose the
// answer before reading it. So the answer's side is shut down and input is
// read and dropped for a moment first (the "lingering close" of web servers).
asio::awaitable<void> linger(Link& link) {
  boost::system::error_code ignored;
  link.client.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 16384> sink;
  std::size_t total = 0;
  link.client.expires_after(kLinger);
  while (total < kLingerLimit) {
    auto [ec, n] = co_await link.client.async_read_some(asio::buffer(sink), kTuple);
    if (ec) break;
    total += n;
  }
}

// The deadline of a stream's next operations (a TLS stream's are its socket's).
template <class Stream>
void expires_after(Stream& stream, std::chrono::seconds wait) {
  beast::get_lowest_layer(stream).expires_after(wait);
}

// A body the proxy passes on as it is, between two plain sockets: its
// header written, the bytes read with it passed on, then the rest spliced
// (splice.h) — a Content-Length's worth, or everything to the origin's close.
template <bool isRequest>
asio::awaitable<boost::system::error_code> splice_body(beast::tcp_stream& in, beast::flat_buffer& buffer,
                                                       http::parser<isRequest, http::buffer_body>& parser,
                                                       http::serializer<isRequest, http::buffer_body>& serializer,
                                                       beast::tcp_stream& out) {
  expires_after(out, kIoWait);
  auto [hec, hn] = co_await http::async_write_header(out, serializer, kTuple);
  if (hec) co_return hec;
  std::optional<std::uint64_t> left;
  if (auto length = parser.content_length_remaining()) left = *length;
  const std::size_t held = left ? static_cast<std::size_t>(std::min<std::uint64_t>(*left, buffer.size())) : buffer.size();
  if (held > 0) {
    expires_after(out, kIoWait);
    auto [wec, wn] = co_await asio::async_write(out, asio::buffer(buffer.data().data(), held), kTuple);
    if (wec) co_return wec;
    buffer.consume(held);
    if (left) *left -= held;
  }
  if (left && *left == 0) co_return boost::system::error_code{};
  auto moved = co_await splice_bytes(in.socket(), out.socket(), SpliceLimits{left, kIoWait, nullptr});
  co_return moved.error;
}

// Moves a message's body from `in` to `out`: spliced when both are plain
// sockets and the body's framing passes on unchanged, else through one
// buffer (Beast's relay), which also undoes a chunked coding.
template <bool isRequest, class In, class Out>
asio::awaitable<boost::system::error_code> relay_body(In& in, beast::flat_buffer& buffer,
                                                      http::parser<isRequest, http::buffer_body>& parser,
                                                      http::serializer<isRequest, http::buffer_body>& serializer,
                                                      Out& out, std::vector<char>& chunk) {
  if constexpr (std::is_same_v<In, beast::tcp_stream> && std::is_same_v<Out, beast::tcp_stream>) {
    if (!parser.is_done() && !parser.chunked()) co_return co_await splice_body(in, buffer, parser, serializer, out);
  }
  expires_after(out, kIoWait);
  auto [hec, hn] = co_await http::async_write_header(out, serializer, kTuple);
  if (hec) co_return hec;
  do {
    auto& body = parser.get().body();
    if (!parser.is_done()) {
      body.data = chunk.data();
      body.size = chunk.size();
      expires_after(in, kIoWait);
      auto [rec, rn] = co_await http::async_read(in, buffer, parser, kTuple);
      if (rec == http::error::need_buffer) rec = {};
      if (rec) co_return rec;
      body.size = chunk.size() - body.size;
      body.data = chunk.data();
      body.more = !parser.is_done();
    } else {
      body.data = nullptr;
      body.size = 0;
    }
    expires_after(out, kIoWait);
    auto [wec, wn] = co_await http::async_write(out, serializer, kTuple);
    if (wec == http::error::need_buffer) wec = {};
    if (wec) co_return wec;
  } while (!parser.is_done() && !serializer.is_done());
  co_return boost::system::error_code{};
}

// Relays the origin's answer (interim 1xx answers read and dropped); true
// when the client connection may carry another request.
template <class Client, class Upstream>
asio::awaitable<bool> relay_response(const Session& s, Link& link, Client& client, Upstream& upstream,
                                     const Target& target, bool head, bool client_keep, unsigned client_version,
                                     std::vector<char>& chunk) {
  beast::flat_buffer up_buffer;
  up_buffer.reserve(kReadReserve);
  for (;;) {
    http::response_parser<http::buffer_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);
    if (head) parser.skip(true);
    expires_after(upstream, kIoWait);
    auto [rec, rn] = co_await http::async_read_header(upstream, up_buffer, parser, kTuple);
    if (rec) {
      co_await respond(link, client, http::status::bad_gateway,
                       "agentbox network proxy: " + where(target) + " sent no valid response: " + rec.message());
      co_return false;
    }
    auto& res = parser.get();
    if (res.result_int() >= 100 && res.result_int() < 200) continue;
    drop_hop_by_hop(res);
    bool keep = client_keep && !res.need_eof();  // need_eof after the origin's "Connection: close" is gone
    if (client_version < 11 && res.chunked()) {
      // HTTP/1.0 has no chunked coding: the plain body, ended by the close.
      res.chunked(false);
      keep = false;
    }
    res.keep_alive(keep);
    http::response_serializer<http::buffer_body> serializer(res);
    if (auto ec = co_await relay_body<false>(upstream, up_buffer, parser, serializer, client, chunk)) {
      spdlog::debug("sandbox {}: response from {} cut: {}", s.sandbox, where(target), ec.message());
      co_return false;
    }
    co_return keep;
  }
}

// One plain HTTP request, forwarded; false when the client connection ends.
asio::awaitable<bool> forward(const Session& s, Link& link, beast::flat_buffer& buffer, RequestParser& parser,
                              std::vector<char>& chunk) {
  auto& req = parser.get();
  auto target = absolute_target(req.target());
  if (!target) {
    co_await respond(link, http::status::bad_request, not_absolute(req.target()));
    co_return false;
  }
  spdlog::debug("sandbox {}: {} http://{}{}", s.sandbox, std::string(req.method_string()), where(*target),
                target->path.substr(0, 200));
  if (auto denied = refused_by_policy(s, *target)) {
    co_await respond(link, http::status::forbidden, *denied);
    co_return false;
  }
  if (auto refused = co_await connect_upstream(s, *target, link)) {
    co_await respond(link, refused->status, refused->text);
    co_return false;
  }
  req.target(target->path);
  const Target named{Policy::normalise_host(target->host), target->port, {}};
  const bool keep = co_await exchange(s, link, link.client, buffer, parser, link.upstream, named, 80, chunk);
  link.upstream.close();
  co_return keep;
}

}  // namespace

std::string host_field(const Target& t, std::uint16_t default_port) {
  std::string text = where(t);
  if (t.port == default_port) text.resize(text.size() - 1 - std::to_string(default_port).size());
  return text;
}

template <class Client, class Upstream>
asio::awaitable<bool> exchange(const Session& s, Link& link, Client& client, beast::flat_buffer& buffer,
                               RequestParser& parser, Upstream& upstream, const Target& named,
                               std::uint16_t default_port, std::vector<char>& chunk) {
  auto& req = parser.get();
  const bool client_keep = req.keep_alive();
  const unsigned client_version = req.version();
  const bool head = req.method() == http::verb::head;
  const bool expect_continue = beast::iequals(req[http::field::expect], "100-continue");
  drop_hop_by_hop(req);
  req.erase(http::field::expect);  // answered here, below
  req.set(http::field::host, host_field(named, default_port));
  if (const Secret* secret = s.policy->secret_for(named.host)) add_secret(req, *secret);
  req.keep_alive(false);  // one origin connection per request: no reuse to get wrong
  if (expect_continue) {
    expires_after(client, kConnectWait);
    auto [cec, cn] = co_await asio::async_write(client, asio::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), kTuple);
    if (cec) co_return false;
  }
  http::request_serializer<http::buffer_body> serializer(req);
  if (auto ec = co_await relay_body<true>(client, buffer, parser, serializer, upstream, chunk)) {
    spdlog::debug("sandbox {}: request to {} cut: {}", s.sandbox, where(named), ec.message());
    co_return false;
  }
  co_return co_await relay_response(s, link, client, upstream, named, head, client_keep, client_version, chunk);
}

bool client_ended(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
         ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
         ec == asio::ssl::error::stream_truncated;
}

std::string out_of_place(const http::request_header<>& req, const Target& named, std::uint16_t default_port,
                         std::string_view inside) {
  const std::string_view target = req.target();
  const std::string within = std::string(inside) + " " + where(named);
  if (req.method() == http::verb::connect || target.empty() || target.front() != '/')
    return "inside " + within + " a request's target is a path (/...), not '" + std::string(target.substr(0, 200)) + "'";
  const std::string_view named_in_request = req[http::field::host];
  auto host = split_authority(named_in_request, default_port);
  if (!host || Policy::normalise_host(host->host) != named.host || host->port != named.port)
    return "a request inside " + within + " names the host '" + std::string(named_in_request.substr(0, 200)) +
           "' (only " + where(named) + " is served there)";
  return "";
}

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

std::string where(const Target& t) {
  return (t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
}

std::optional<std::string> refused_by_policy(const Session& s, const Target& t) {
  Decision d = s.policy->check(t.host, t.port);
  if (d.allowed) return std::nullopt;
  std::string host = Policy::normalise_host(t.host);
  s.deny(s.sandbox, host.empty() ? t.host : host, t.port, d.reason);
  return "agentbox network policy: " + d.reason;
}

asio::awaitable<std::optional<Refusal>> connect_upstream(const Session& s, const Target& t, Link& link) {
  std::vector<tcp::endpoint> endpoints;
  const std::string name = Policy::normalise_host(t.host);
  const std::optional<std::string> pinned = s.policy->pinned(name);
  if (pinned || Policy::is_ip_literal(name)) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(pinned ? *pinned : name, ec);
    if (ec)
      co_return Refusal{http::status::forbidden,
                        "agentbox network policy: " + where(t) + " is not an address the proxy can reach"};
    endpoints.emplace_back(address, t.port);
  } else {
    auto [ec, results] = co_await link.resolver.async_resolve(name, std::to_string(t.port), kTuple);
    if (link.closed) co_return Refusal{http::status::service_unavailable, "agentbox network proxy: closing"};
    if (ec || results.empty()) {
      // Built before co_return: GCC 12 destroys string temporaries of a
      // conditional expression twice in a coroutine.
      std::string why = ec ? ec.message() : "no address";
      co_return Refusal{http::status::bad_gateway, "agentbox network proxy: cannot resolve " + name + ": " + why};
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  for (const auto& endpoint : endpoints) {
    Decision d = s.policy->check_address(endpoint.address().to_string(), name, t.port);
    if (!d.allowed) {
      s.deny(s.sandbox, name, t.port, d.reason);
      co_return Refusal{http::status::forbidden, "agentbox network policy: " + d.reason};
    }
  }
  if (link.closed) co_return Refusal{http::status::service_unavailable, "agentbox network proxy: closing"};
  link.upstream.close();  // a previous request's
  link.upstream.expires_after(kConnectWait);
  auto [ec, reached] = co_await link.upstream.async_connect(endpoints, kTuple);
  if (ec == beast::error::timeout)
    co_return Refusal{http::status::bad_gateway, "agentbox network proxy: " + where(t) + " did not accept a connection within " +
                                                     std::to_string(kConnectWait.count()) + " s"};
  if (ec)
    co_return Refusal{http::status::bad_gateway,
                      "agentbox network proxy: cannot connect to " + where(t) + ": " + ec.message()};
  co_return std::nullopt;
}

template <class Client>
asio::awaitable<void> respond(Link& link, Client& client, http::status status, const std::string& text) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.set(http::field::connection, "close");
  res.body() = text + "\n";
  res.prepare_payload();
  expires_after(client, kConnectWait);
  auto [ec, n] = co_await http::async_write(client, res, kTuple);
  if (!ec) co_await linger(link);
}

asio::awaitable<void> respond(Link& link, http::status status, const std::string& text) {
  co_await respond(link, link.client, status, text);
}

asio::awaitable<void> serve_connection(Session session, std::shared_ptr<Link> link) {
  beast::flat_buffer buffer;
  buffer.reserve(kReadReserve);
  std::vector<char> chunk(kBodyChunk);
  for (;;) {
    RequestParser parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);
    link->client.expires_after(kRequestWait);
    auto [ec, n] = co_await http::async_read_header(link->client, buffer, parser, kTuple);
    if (link->closed || ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset)
      co_return;
    if (ec) {
      co_await respond(*link,
                       ec == http::error::header_limit ? http::status::request_header_fields_too_large
                                                       : http::status::bad_request,
                       "agentbox network proxy: not a valid HTTP request: " + ec.message());
      co_return;
    }
    if (parser.get().method() == http::verb::connect) {
      std::string authority(parser.get().target());
      co_await tunnel(session, *link, buffer, authority);
      co_return;
    }
    if (!co_await forward(session, *link, buffer, parser, chunk)) co_return;
  }
}

// Plain HTTP's and interception's (proxy_io.h).
template asio::awaitable<bool> exchange(const Session&, Link&, beast::tcp_stream&, beast::flat_buffer&, RequestParser&,
                                        beast::tcp_stream&, const Target&, std::uint16_t, std::vector<char>&);
template asio::awaitable<bool> exchange(const Session&, Link&, TlsStream&, beast::flat_buffer&, RequestParser&,
                                        TlsStream&, const Target&, std::uint16_t, std::vector<char>&);
template asio::awaitable<void> respond(Link&, TlsStream&, http::status, const std::string&);

}  // namespace agentbox::network
