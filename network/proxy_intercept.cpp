// An intercepted CONNECT (docs/network.md, "HTTPS to a host with a secret"):
// the box's TLS ends here with a certificate the state directory's CA
// (ca.h) signs for the CONNECT host, which only boxes trust; each HTTP/1.1
// request read from it goes to the origin over a TLS connection of its own,
// whose certificate is verified against the server's trust store and the
// host's name, with the same header processing as plain HTTP (exchange in
// proxy_http.cpp). Only the CONNECT host is served inside: a request naming
// another gets 403 and goes nowhere. OpenSSL does the TLS, Beast the HTTP.
#include "network/proxy_io.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace agentbox::network {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kShutdownWait = 2s;  // for the box's close_notify after ours
constexpr unsigned char kHttp11[] = "\x08http/1.1";  // ALPN's wire form: length, name

// HTTP/1.1 is all the proxy speaks: a client offering only h2 gets no ALPN
// answer, which means HTTP/1.1 (RFC 7301 section 3.2).
int select_http11(SSL*, const unsigned char** out, unsigned char* out_size, const unsigned char* offered,
                  unsigned offered_size, void*) {
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, out_size, kHttp11, sizeof kHttp11 - 1, offered, offered_size) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

void tls12_or_later(ssl::context& context) {
  if (SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION) != 1)
    throw std::runtime_error("the proxy cannot require TLS 1.2 of its TLS connections");
}

// The origin's name checked against its certificate (and sent as SNI):
// OpenSSL's own host and address matching, run during the handshake.
bool name_origin(TlsStream& origin, const std::string& host) {
  SSL* handle = origin.native_handle();
  if (Policy::is_ip_literal(host)) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), host.c_str()) == 1;
  return SSL_set_tlsext_host_name(handle, host.c_str()) == 1 && SSL_set1_host(handle, host.c_str()) == 1;
}

// Why the origin's handshake failed: OpenSSL's verification sentence when
// the certificate is what failed.
std::string handshake_failure(TlsStream& origin, const boost::system::error_code& ec) {
  long verified = SSL_get_verify_result(origin.native_handle());
  if (verified != X509_V_OK)
    return std::string("its certificate did not verify (") + X509_verify_cert_error_string(verified) + ")";
  return "the TLS handshake failed (" + ec.message() + ")";
}

// TLS writes a message as several records (a header, then the body): with
// Nagle's algorithm the later ones wait for the peer's delayed ACK, 40 ms
// each (measured: +72 ms on a small GET before this).
void no_delay(beast::tcp_stream& stream) {
  boost::system::error_code ignored;
  stream.socket().set_option(asio::ip::tcp::no_delay(true), ignored);
}

// A TLS connection to the origin, verified, on link.upstream; or why not
// (the box is told when its request comes).
struct Origin {
  std::unique_ptr<TlsStream> tls;
  std::optional<Refusal> refusal;
};

asio::awaitable<Origin> open_origin(const Session& s, Link& link, const Target& named) {
  if (auto refused = co_await connect_upstream(s, named, link)) co_return Origin{nullptr, std::move(refused)};
  no_delay(link.upstream);
  auto origin = std::make_unique<TlsStream>(link.upstream, s.interceptor->client());
  if (!name_origin(*origin, named.host))
    co_return Origin{nullptr, Refusal{http::status::bad_gateway,
                                      "agentbox network proxy: cannot check a certificate against the name " + named.host}};
  link.upstream.expires_after(kConnectWait);
  auto [ec] = co_await origin->async_handshake(ssl::stream_base::client, kTuple);
  if (ec) {
    std::string why = handshake_failure(*origin, ec);
    spdlog::info("sandbox {}: TLS to {} refused: {}", s.sandbox, where(named), why);
    co_return Origin{nullptr, Refusal{http::status::bad_gateway,
                                      "agentbox network proxy: cannot reach " + where(named) + " over TLS: " + why}};
  }
  co_return Origin{std::move(origin), std::nullopt};
}

// One request read from the box's TLS; false when the connection ends.
// `early` is the origin opened while the box's handshake ran (the first
// request's), else one is opened now.
asio::awaitable<bool> serve_request(const Session& s, Link& link, TlsStream& box, beast::flat_buffer& buffer,
                                    RequestParser& parser, const Target& named, std::vector<char>& chunk,
                                    std::optional<Origin>& early) {
  const std::string_view path = parser.get().target();
  spdlog::debug("sandbox {}: {} https://{}{}", s.sandbox, std::string(parser.get().method_string()), where(named),
                std::string(path.substr(0, 200)));
  if (std::string why = out_of_place(parser.get(), named, 443, "the TLS connection to"); !why.empty()) {
    s.deny(s.sandbox, named.host, named.port, why);
    co_await respond(link, box, http::status::forbidden, "agentbox network policy: " + why);
    co_return false;
  }
  // Not a conditional expression around the co_await: GCC 12 mishandles
  // the temporaries of one in a coroutine.
  Origin origin;
  if (early)
    origin = std::move(*early);
  else
    origin = co_await open_origin(s, link, named);
  early.reset();
  if (origin.refusal) {
    co_await respond(link, box, origin.refusal->status, origin.refusal->text);
    co_return false;
  }
  const bool keep = co_await exchange(s, link, box, buffer, parser, *origin.tls, named, 443, chunk);
  link.upstream.close();  // no close_notify: the origin connection was for this request only
  co_return keep;
}

}  // namespace

Interceptor::Interceptor(std::shared_ptr<CertificateAuthority> ca)
    : ca_(std::move(ca)), client_(ssl::context::tls_client) {
  tls12_or_later(client_);
  client_.set_default_verify_paths();
  client_.set_verify_mode(ssl::verify_peer);
  if (SSL_CTX_set_alpn_protos(client_.native_handle(), kHttp11, sizeof kHttp11 - 1) != 0)
    throw std::runtime_error("the proxy cannot offer ALPN http/1.1 to origins");
}

ssl::context& Interceptor::server_for(const std::string& host) {
  if (auto found = servers_.find(host); found != servers_.end()) return *found->second;
  Pem leaf = ca_->leaf_for(host);
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  tls12_or_later(*context);
  context->use_certificate_chain(asio::buffer(leaf.certificate));
  context->use_private_key(asio::buffer(leaf.key), ssl::context::pem);
  SSL_CTX_set_alpn_select_cb(context->native_handle(), select_http11, nullptr);
  return *servers_.emplace(host, std::move(context)).first->second;
}

asio::awaitable<void> intercept(const Session& s, Link& link, const Target& named, std::string hello) {
  ssl::context* context = nullptr;
  try {
    context = &s.interceptor->server_for(named.host);
  } catch (const std::exception& e) {
    spdlog::error("sandbox {}: no certificate for {}: {}", s.sandbox, named.host, e.what());
    co_return;
  }
  no_delay(link.client);
  TlsStream box(link.client, *context);
  link.client.expires_after(kConnectWait);
  // The hello already read is handed to OpenSSL as the handshake's start.
  // The first request's origin connection is opened meanwhile: the CONNECT
  // host has passed the policy, and nothing of the box's goes upstream
  // before its request has passed out_of_place.
  auto handshake = [&]() -> asio::awaitable<boost::system::error_code> {
    auto [ec, used] = co_await box.async_handshake(ssl::stream_base::server, asio::buffer(hello), kTuple);
    co_return ec;
  };
  auto [hec, opened] = co_await (handshake() && open_origin(s, link, named));
  std::optional<Origin> early(std::move(opened));
  if (hec) {
    spdlog::debug("sandbox {}: TLS from the box for {} failed: {}", s.sandbox, where(named), hec.message());
    co_return;
  }
  beast::flat_buffer buffer;
  buffer.reserve(kReadReserve);
  std::vector<char> chunk(kBodyChunk);
  for (;;) {
    RequestParser parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);
    link.client.expires_after(kRequestWait);
    auto [ec, n] = co_await http::async_read_header(box, buffer, parser, kTuple);
    if (link.closed || client_ended(ec)) co_return;
    if (ec) {
      co_await respond(link, box,
                       ec == http::error::header_limit ? http::status::request_header_fields_too_large
                                                       : http::status::bad_request,
                       "agentbox network proxy: not a valid HTTP request: " + ec.message());
      co_return;
    }
    if (!co_await serve_request(s, link, box, buffer, parser, named, chunk, early)) break;
  }
  if (link.closed) co_return;
  // A response that ends with the connection needs the close_notify.
  link.client.expires_after(kShutdownWait);
  co_await box.async_shutdown(kTuple);  // its error, if any, changes nothing now
}

}  // namespace agentbox::network
