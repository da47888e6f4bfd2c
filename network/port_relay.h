// Exposed ports (docs/design.md section 12): a listener on the host whose
// every connection is relayed, bytes untouched, to a stream socket the
// caller connects to a port inside a box. A plain TCP relay, so HTTP,
// WebSocket and anything else over TCP all pass. The bytes move with
// splice(2) (splice.h); the connect step, which may have to start or
// restore a box, runs on worker threads so it never holds up the relay.
//
// Knows no sandbox: the caller's connect function says where a connection
// goes, or gives the sentence to answer instead (sent as an HTTP 502, which
// is what a browser or curl shows; a non-HTTP client just sees the text and
// the close).
#pragma once

#include "os/unique_fd.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace agentbox::network {

// What a connection is relayed to: a connected stream socket, or (none)
// the sentence its client is answered with instead.
struct RelayTarget {
  os::UniqueFd socket;
  std::string refusal;
};

// Blocking; runs on one of the relay's worker threads. May throw: the
// exception's text is the refusal.
using RelayConnect = std::function<RelayTarget()>;
// Non-blocking, on the relay's I/O thread: a socket whose non-blocking
// connect is under way (or done), or none to take the connect step instead.
// A connect that fails goes the connect step's way too.
using RelayQuick = std::function<std::optional<RelayTarget>()>;
// Bytes moved on one of the listener's connections lately (at most once per
// kActivityEvery per connection); on a worker thread. May be empty.
using RelayActivity = std::function<void()>;

struct RelayListener {
  std::string address;  // "127.0.0.1" unless --expose-address says otherwise
  std::uint16_t port = 0;  // 0: any free port
  RelayConnect connect;
  RelayQuick quick;  // may be empty
  RelayActivity activity;
};

class PortRelay {
 public:
  static constexpr std::chrono::seconds kActivityEvery{30};
  static constexpr std::size_t kMaxConnections = 256;  // per listener; more are answered 503

  PortRelay();
  ~PortRelay();  // closes every listener and connection
  PortRelay(const PortRelay&) = delete;
  PortRelay& operator=(const PortRelay&) = delete;

  // Listens under `key` (replacing what the key had); returns the port
  // bound. Throws std::system_error (EADDRINUSE, EADDRNOTAVAIL...) or
  // std::invalid_argument for an address that is not an IP address.
  std::uint16_t open(const std::string& key, RelayListener listener);
  // Closes the key's listener and its open connections; false when none.
  bool close(const std::string& key);
  bool is_open(const std::string& key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentbox::network
