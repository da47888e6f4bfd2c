// Exposed ports (docs/design.md section 12): a conversation's port inside
// its box, reached from the host at http://<expose address>:<host port>
// through the relay (network/port_relay.h). The box keeps no network: each
// connection is relayed to a socket the server makes in the box's network
// namespace (net_namespace.h) and connects there itself.
//
// The mappings are catalog rows kept by conversation, so a URL stays the
// same over an idle teardown and restore, a server restart (the listeners
// open again when the server starts) and a destroy. A connection to the
// URL of a box torn down at idle restores it (that is use, like a call);
// one whose conversation has no sandbox any more (destroyed) is answered
// 502 with a sentence saying so, as is one to a port nothing listens on.
// Right after a connection brought the box back, a refused connect is
// retried for a few seconds: its services (process_start restart:
// "on-restore") are starting again. Bytes moving on a relayed connection
// count as use too, so a box is not torn down under an open WebSocket.
#pragma once

#include "network/port_relay.h"
#include "os/unique_fd.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

class Manager;
class AgentClient;
class Lease;

// One exposed port as port_list shows it.
struct ExposedPort {
  int port = 0;       // inside the box
  int host_port = 0;  // on the host
  std::string address;
  std::string url;
  bool relaying = false;  // this server listens on it now
  std::string note;       // when not relaying: why
  std::optional<bool> listening;  // something accepts on the port inside the running box; none: not running
};

class ExposedPorts {
 public:
  static constexpr std::size_t kMaxPerConversation = 32;
  static constexpr std::chrono::seconds kServiceWait{10};  // after a connection brought the box back

  ExposedPorts(std::shared_ptr<Manager> manager, std::string address);
  ~ExposedPorts();

  // Opens the listener of every mapping in the catalog (server start); a
  // host port now taken by something else is logged and listed with why.
  void open_all();
  // Maps the port (again: the same URL; a new host_port moves it). Throws
  // SandboxError: INVALID_ARGUMENT for a port out of range or too many,
  // PORT_UNAVAILABLE when the host port cannot be had.
  ExposedPort expose(const std::string& conversation, int port, std::optional<int> host_port);
  std::vector<ExposedPort> list(const std::string& conversation);
  // False when the port was not exposed.
  bool unexpose(const std::string& conversation, int port);

 private:
  struct Stock {
    std::weak_ptr<AgentClient> client;  // the box the sockets were made in
    std::vector<os::UniqueFd> sockets;
  };

  network::RelayTarget connect(const std::string& conversation, int port);
  std::optional<network::RelayTarget> quick(const std::string& conversation, int port);
  os::UniqueFd take_socket(const std::string& sandbox, Lease& lease);
  // Connects a socket made in the box to its 127.0.0.1:port, then ::1 when
  // refused: 0 with `connected` set, or the errno (ECONNREFUSED: nothing
  // listens). Throws SandboxError when no socket can be made.
  int connect_inside(const std::string& sandbox, Lease& lease, int port, os::UniqueFd& connected);
  std::optional<bool> probe(const std::string& conversation, int port);
  ExposedPort describe(const std::string& conversation, int port, int host_port, const std::string& address);
  std::string open_listener(const std::string& conversation, int port, int host_port, const std::string& address,
                            int& bound);

  std::shared_ptr<Manager> manager_;
  std::string address_;
  std::mutex mutex_;                     // stocks_, notes_
  std::map<std::string, Stock> stocks_;  // by sandbox id
  std::map<std::string, std::string> notes_;  // relay key → why its listener is not open
  network::PortRelay relay_;  // last: its connections end before what they use
};

}  // namespace agentbox::sandbox
