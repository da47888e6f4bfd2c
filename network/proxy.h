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
//     relayed both ways untouched.
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

struct Denial {
  std::string host;
  std::uint16_t port = 0;
  std::string reason;  // the same sentence the 403's body gives
  std::chrono::system_clock::time_point at;
};

class Proxy {
 public:
  // Starts the proxy's I/O thread(s). Throws std::runtime_error.
  Proxy();
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentbox::network
