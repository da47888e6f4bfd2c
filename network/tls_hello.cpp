#include "network/tls_hello.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>

namespace agentbox::network {

namespace {

struct Seen {
  bool called = false;
  std::optional<std::string> name;
};

// Called once the whole ClientHello is parsed; stops the handshake there.
int on_server_name(SSL* ssl, int* alert, void*) {
  auto* seen = static_cast<Seen*>(SSL_get_app_data(ssl));
  seen->called = true;
  if (const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name)) seen->name = name;
  *alert = SSL_AD_UNRECOGNIZED_NAME;
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

SSL_CTX* reading_context() {
  static SSL_CTX* ctx = [] {
    SSL_CTX* made = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_tlsext_servername_callback(made, on_server_name);
    return made;
  }();
  return ctx;
}

}  // namespace

ClientHello read_client_hello(std::string_view bytes) {
  ClientHello out;
  SSL_CTX* ctx = reading_context();
  if (!ctx) {
    out.state = ClientHello::State::NotTls;
    return out;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx), SSL_free);
  if (!ssl) {
    out.state = ClientHello::State::NotTls;
    return out;
  }
  Seen seen;
  SSL_set_app_data(ssl.get(), &seen);  // per connection: the context is shared
  BIO* in = BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size()));
  BIO* out_bio = BIO_new(BIO_s_mem());  // the alert goes here, never to the client
  BIO_set_mem_eof_return(in, -1);       // empty: "want more", not EOF
  SSL_set_bio(ssl.get(), in, out_bio);
  SSL_set_accept_state(ssl.get());
  int rc = SSL_do_handshake(ssl.get());
  int err = SSL_get_error(ssl.get(), rc);
  ERR_clear_error();
  if (seen.called) {
    out.state = ClientHello::State::Read;
    out.server_name = seen.name;
  } else if (err == SSL_ERROR_WANT_READ) {
    out.state = ClientHello::State::NeedMore;
  } else {
    out.state = ClientHello::State::NotTls;
  }
  return out;
}

}  // namespace agentbox::network
