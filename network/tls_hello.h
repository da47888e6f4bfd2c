// The server name a TLS client asks for, read from the start of a CONNECT
// tunnel by OpenSSL itself (a server-side handshake fed from memory, stopped
// in its server-name callback): nothing of TLS is parsed by hand here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace agentbox::network {

struct ClientHello {
  enum class State { NeedMore, Read, NotTls } state = State::NeedMore;
  std::optional<std::string> server_name;  // when Read: the SNI host name, if the client sent one
};

// Reads `bytes` (everything the client sent so far) as the start of a TLS
// handshake. NeedMore: the ClientHello is not whole yet.
ClientHello read_client_hello(std::string_view bytes);

}  // namespace agentbox::network
