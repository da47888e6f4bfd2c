// The relay of exposed ports (network/port_relay.h) against a real echo
// server on loopback: bytes both ways and a half-close, the 502 of a
// refusal and of a connect step that throws, close() ending open
// connections, a host port in use, the quick path and its fallback.
#include "network/port_relay.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <system_error>
#include <thread>
#include <unistd.h>

using agentbox::network::PortRelay;
using agentbox::network::RelayListener;
using agentbox::network::RelayTarget;
using agentbox::os::UniqueFd;

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

UniqueFd connect_to(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto address = loopback(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  return fd;
}

// Reads until EOF (or 10 s without bytes).
std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, 10000) != 1) break;
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

// Echoes each connection until its end, then closes it.
class EchoServer {
 public:
  EchoServer() : listener_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    auto address = loopback(0);
    REQUIRE(bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(listen(listener_.get(), 16) == 0);
    socklen_t size = sizeof address;
    getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept(listener_.get(), nullptr, nullptr);
        if (c < 0) return;
        std::thread([c] {
          char buffer[65536];
          ssize_t n;
          while ((n = read(c, buffer, sizeof buffer)) > 0)
            for (ssize_t done = 0; done < n;) {
              ssize_t w = write(c, buffer + done, static_cast<std::size_t>(n - done));
              if (w <= 0) break;
              done += w;
            }
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  UniqueFd listener_;
  int port_ = 0;
  std::thread thread_;
};

RelayListener to_echo(const EchoServer& echo, std::atomic<int>* calls = nullptr) {
  RelayListener listener;
  listener.address = "127.0.0.1";
  int port = echo.port();
  listener.connect = [port, calls] {
    if (calls) ++*calls;
    RelayTarget target;
    target.socket = connect_to(port);
    if (!target.socket) target.refusal = "the echo server is gone";
    return target;
  };
  return listener;
}

}  // namespace

TEST_CASE("the relay passes bytes both ways and a half-close", "[relay]") {
  EchoServer echo;
  PortRelay relay;
  std::atomic<int> calls{0};
  int port = relay.open("echo", to_echo(echo, &calls));
  REQUIRE(port > 0);
  UniqueFd client = connect_to(port);
  REQUIRE(client);
  std::string sent(4 << 20, '\0');
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 131 % 251);
  std::thread writer([&] {
    for (std::size_t done = 0; done < sent.size();) {
      ssize_t w = write(client.get(), sent.data() + done, sent.size() - done);
      if (w <= 0) break;
      done += static_cast<std::size_t>(w);
    }
    shutdown(client.get(), SHUT_WR);  // the echo server sees the end, echoes the rest and closes
  });
  std::string got = read_all(client.get());
  writer.join();
  CHECK(got.size() == sent.size());
  CHECK(got == sent);
  CHECK(calls == 1);
}

TEST_CASE("a refusal is answered 502 with its sentence", "[relay]") {
  PortRelay relay;
  RelayListener listener;
  listener.address = "127.0.0.1";
  listener.connect = [] { return RelayTarget{UniqueFd(), "nothing listens on port 8000 in the sandbox"}; };
  int port = relay.open("refused", std::move(listener));
  UniqueFd client = connect_to(port);
  std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(write(client.get(), request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string answer = read_all(client.get());
  CHECK(answer.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
  CHECK(answer.find("Connection: close") != std::string::npos);
  CHECK(answer.find("\r\n\r\nnothing listens on port 8000 in the sandbox\n") != std::string::npos);
}

TEST_CASE("a connect step that throws is a 502 too, and the relay goes on", "[relay]") {
  EchoServer echo;
  PortRelay relay;
  std::atomic<int> calls{0};
  RelayListener listener = to_echo(echo);
  listener.connect = [&calls, inner = listener.connect]() -> RelayTarget {
    if (++calls == 1) throw std::runtime_error("the sandbox could not be restored");
    return inner();
  };
  int port = relay.open("throws", std::move(listener));
  UniqueFd first = connect_to(port);
  CHECK(read_all(first.get()).find("the sandbox could not be restored") != std::string::npos);
  UniqueFd second = connect_to(port);
  REQUIRE(write(second.get(), "hi", 2) == 2);
  shutdown(second.get(), SHUT_WR);
  CHECK(read_all(second.get()) == "hi");
}

TEST_CASE("close ends open connections and the listener; a port in use is an error", "[relay]") {
  EchoServer echo;
  PortRelay relay;
  int port = relay.open("key", to_echo(echo));
  UniqueFd open_connection = connect_to(port);
  REQUIRE(write(open_connection.get(), "x", 1) == 1);
  char c = 0;
  REQUIRE(read(open_connection.get(), &c, 1) == 1);  // relayed and echoed: the connection is up
  CHECK_THROWS_AS(relay.open("other", [&] {
    RelayListener l = to_echo(echo);
    l.port = static_cast<std::uint16_t>(port);
    return l;
  }()), std::system_error);
  CHECK(relay.is_open("key"));
  CHECK(relay.close("key"));
  CHECK_FALSE(relay.is_open("key"));
  CHECK(read_all(open_connection.get()).empty());  // ended, not left hanging
  CHECK_FALSE(connect_to(port));
  CHECK_FALSE(relay.close("key"));
  CHECK_THROWS_AS(relay.open("bad", [&] {
    RelayListener l = to_echo(echo);
    l.address = "not an address";
    return l;
  }()), std::invalid_argument);
}

TEST_CASE("the quick path relays a connect under way; a failed one takes the connect step", "[relay]") {
  EchoServer echo;
  PortRelay relay;
  std::atomic<int> slow{0};
  std::atomic<int> quick{0};
  std::atomic<int> quick_port{echo.port()};
  RelayListener listener = to_echo(echo, &slow);
  listener.quick = [&]() -> std::optional<RelayTarget> {
    ++quick;
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    auto address = loopback(quick_port);
    int rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
    if (rc != 0 && errno != EINPROGRESS) return std::nullopt;
    return RelayTarget{std::move(fd), ""};
  };
  int port = relay.open("quick", std::move(listener));
  auto round_trip = [&] {
    UniqueFd client = connect_to(port);
    REQUIRE(write(client.get(), "abc", 3) == 3);
    shutdown(client.get(), SHUT_WR);
    return read_all(client.get());
  };
  CHECK(round_trip() == "abc");
  CHECK(quick == 1);
  CHECK(slow == 0);
  // A port nobody listens on: the quick connect fails, the connect step relays.
  UniqueFd unused(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto address = loopback(0);
  REQUIRE(bind(unused.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t size = sizeof address;
  getsockname(unused.get(), reinterpret_cast<sockaddr*>(&address), &size);
  quick_port = ntohs(address.sin_port);  // bound, not listening: refused
  CHECK(round_trip() == "abc");
  CHECK(quick == 2);
  CHECK(slow == 1);
}
