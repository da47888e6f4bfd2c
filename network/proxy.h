// The egress proxy of `--network proxy` (docs/design.md section 10): the
// only way out of a sandbox. The server runs it on the host; each sandbox's
// listener is a TCP socket on a loopback port *inside the sandbox's network
// namespace* (made there by net_listener.h and handed to the proxy), so a
// box reaches nothing but this proxy, and the proxy knows which box each
// connection comes from by the listener it arrived on.
//
// Speaks HTTP/1.1 (Boost.Beast parses; nothing is hand-parsed):
//   - absolute-form requests ("GET http://host:port/path"): checked against
//     the box's policy, forwarded to the origin in origin form, the response
//     streamed back (bodies are never held whole);
//   - CONNECT host:port: checked, answered 200, then the first TLS record is
//     read and its server name (SNI, read by OpenSSL's client-hello callback)
//     must name the CONNECT host, or the tunnel is closed; then bytes are
//     relayed both ways untouched;
//   - CONNECT to a host that has a secret, when the proxy has a CA: the
//     same checks, then TLS ended here with the CA's certificate for that
//     host, and each request inside forwarded as plain HTTP's are, over TLS
//     to the origin, whose certificate is verified (proxy_intercept.cpp).
// Names are resolved here (`resolve` first, then the host's resolver), and
// every address is checked against the deny entries before connecting. A
// denied request gets 403 with a body naming the host and the rule, and is
// recorded as a Denial for that box (exec results and network_status show
// them).
#pragma once

#include "network/policy.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace agentbox::network {

class CertificateAuthority;  // network/ca.h

struct Denial {
  std::string host;
  std::uint16_t port = 0;
  std::string reason;  // the same sentence the 403's body gives
  std::chrono::system_clock::time_point at;
};

class Proxy {
 public:
  // Starts the proxy's I/O thread(s). With a CA, CONNECTs to hosts with a
  // secret are intercepted, and origins' certificates are checked against
  // the trust store OpenSSL's default paths name now (SSL_CERT_FILE and
  // SSL_CERT_DIR honoured); without one every CONNECT is tunnelled.
  // Throws std::runtime_error.
  explicit Proxy(std::shared_ptr<CertificateAuthority> ca = nullptr);
  ~Proxy();  // closes every listener and connection, joins the threads
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Serves connections accepted on `listener_fd` (a listening TCP socket,
  // which the proxy now owns) for `sandbox` under `policy`. A sandbox
  // attached again (a restart of its box) replaces its listener and policy.
  void attach(const std::string& sandbox, int listener_fd, std::shared_ptr<const Policy> policy);
  // Closes the sandbox's listener and its open connections. Idempotent.
  // Its denials stay (a stopped box's are still shown).
  void detach(const std::string& sandbox);
  // Drops the sandbox's denials too (it is destroyed). Idempotent.
  void forget(const std::string& sandbox);

  // Denials for `sandbox` recorded at or after `since`, oldest first (the
  // last 64 are kept per sandbox).
  std::vector<Denial> denials(const std::string& sandbox, std::chrono::system_clock::time_point since) const;

  // The CA boxes must trust for interception; null when there is none.
  std::shared_ptr<CertificateAuthority> authority() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentbox::network
