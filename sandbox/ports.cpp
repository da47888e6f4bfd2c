// Exposed ports (ports.h): the catalog rows, the listeners of the relay,
// and the connect step each relayed connection takes.
#include "sandbox/ports.h"

#include "contract/errors.h"
#include "os/errno_text.h"
#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <system_error>
#include <thread>

namespace agentbox::sandbox {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kStockBatch = 16;  // one helper fork per 16 connections
constexpr int kConnectWaitMs = 5000;

std::string relay_key(const std::string& conversation, int port) {
  return conversation + '\n' + std::to_string(port);
}

std::string url_of(const std::string& address, int host_port) {
  bool v6 = address.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + address + "]" : address) + ":" + std::to_string(host_port);
}

void check_port(int port, const char* field) {
  if (port < 1 || port > 65535)
    throw SandboxError(codes::kInvalidArguments,
                       std::string(field) + " must be a TCP port, 1 to 65535 (got " + std::to_string(port) + ")");
}

// Connects a socket made in the box to the port on its loopback: IPv4's
// (through a dual-stack socket, as ::ffff:127.0.0.1) or, when `v6`, ::1.
// 0 or the errno of the failure.
int connect_loopback(int fd, int port, bool v6, bool wait = true) {
  sockaddr_storage storage{};
  socklen_t size = 0;
  sockaddr_storage own{};
  socklen_t own_size = sizeof own;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&own), &own_size) != 0) return errno;
  if (own.ss_family == AF_INET6) {
    auto* address = reinterpret_cast<sockaddr_in6*>(&storage);
    address->sin6_family = AF_INET6;
    address->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (v6) address->sin6_addr = in6addr_loopback;
    else inet_pton(AF_INET6, "::ffff:127.0.0.1", &address->sin6_addr);
    size = sizeof *address;
  } else {
    if (v6) return EAFNOSUPPORT;
    auto* address = reinterpret_cast<sockaddr_in*>(&storage);
    address->sin_family = AF_INET;
    address->sin_port = htons(static_cast<std::uint16_t>(port));
    address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size = sizeof *address;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&storage), size) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  if (!wait) return EINPROGRESS;
  // A listener whose backlog is full drops the SYN: bounded, not a hang.
  pollfd ready{fd, POLLOUT, 0};
  int n = poll(&ready, 1, kConnectWaitMs);
  if (n == 0) return ETIMEDOUT;
  if (n < 0) return errno;
  int err = 0;
  socklen_t err_size = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_size) != 0) return errno;
  return err;
}

}  // namespace

ExposedPorts::ExposedPorts(std::shared_ptr<Manager> manager, std::string address)
    : manager_(std::move(manager)), address_(std::move(address)) {}

ExposedPorts::~ExposedPorts() = default;

std::string ExposedPorts::open_listener(const std::string& conversation, int port, int host_port,
                                        const std::string& address, int& bound) {
  network::RelayListener listener;
  listener.address = address;
  listener.port = static_cast<std::uint16_t>(host_port);
  listener.connect = [this, conversation, port] { return connect(conversation, port); };
  listener.quick = [this, conversation, port] { return quick(conversation, port); };
  listener.activity = [this, conversation] { (void)manager_->try_acquire(conversation); };
  try {
    bound = relay_.open(relay_key(conversation, port), std::move(listener));
    std::lock_guard lock(mutex_);
    notes_.erase(relay_key(conversation, port));
    return "";
  } catch (const std::system_error& e) {
    return os::errno_text("cannot listen on " + url_of(address, host_port), e.code().value());
  } catch (const std::exception& e) {
    return std::string("cannot listen on ") + url_of(address, host_port) + ": " + e.what();
  }
}

void ExposedPorts::open_all() {
  for (const auto& row : manager_->catalog().exposed_ports("")) {
    int bound = 0;
    std::string why = open_listener(row.conversation, row.port, row.host_port, row.address, bound);
    if (why.empty()) {
      spdlog::info("exposed port {} of conversation {} is at {} again", row.port, row.conversation,
                   url_of(row.address, row.host_port));
      continue;
    }
    why += " (another agentbox on this state directory may relay it; port_expose moves it)";
    spdlog::warn("exposed port {} of conversation {}: {}", row.port, row.conversation, why);
    std::lock_guard lock(mutex_);
    notes_[relay_key(row.conversation, row.port)] = why;
  }
}

ExposedPort ExposedPorts::expose(const std::string& conversation, int port, std::optional<int> host_port) {
  check_port(port, "port");
  if (host_port) check_port(*host_port, "host_port");
  auto rows = manager_->catalog().exposed_ports(conversation);
  const persistence::ExposedPortRecord* kept = nullptr;
  for (const auto& row : rows)
    if (row.port == port) kept = &row;
  std::string key = relay_key(conversation, port);
  if (kept && (!host_port || *host_port == kept->host_port) && kept->address == address_ && relay_.is_open(key))
    return describe(conversation, port, kept->host_port, kept->address);
  if (!kept && rows.size() >= kMaxPerConversation)
    throw SandboxError(codes::kInvalidArguments, "a conversation exposes at most " +
                                                     std::to_string(kMaxPerConversation) +
                                                     " ports; port_unexpose one first");
  // The URL stays what it was unless the caller names another host port.
  int wanted = host_port ? *host_port : kept ? kept->host_port : 0;
  int bound = 0;
  std::string why = open_listener(conversation, port, wanted, address_, bound);
  if (!why.empty() && kept && !host_port && wanted != 0) why = open_listener(conversation, port, 0, address_, bound);
  if (!why.empty()) throw SandboxError(codes::kPortUnavailable, why);
  try {
    manager_->catalog().add_exposed_port({conversation, port, bound, address_, ""});
  } catch (const std::exception& e) {
    relay_.close(key);
    throw SandboxError(codes::kPortUnavailable, std::string("cannot record the exposed port: ") + e.what());
  }
  spdlog::info("conversation {}: port {} exposed at {}", conversation, port, url_of(address_, bound));
  return describe(conversation, port, bound, address_);
}

std::vector<ExposedPort> ExposedPorts::list(const std::string& conversation) {
  std::vector<ExposedPort> out;
  for (const auto& row : manager_->catalog().exposed_ports(conversation))
    out.push_back(describe(conversation, row.port, row.host_port, row.address));
  return out;
}

bool ExposedPorts::unexpose(const std::string& conversation, int port) {
  check_port(port, "port");
  bool removed = manager_->catalog().remove_exposed_port(conversation, port);
  bool closed = relay_.close(relay_key(conversation, port));
  std::lock_guard lock(mutex_);
  notes_.erase(relay_key(conversation, port));
  return removed || closed;
}

ExposedPort ExposedPorts::describe(const std::string& conversation, int port, int host_port,
                                   const std::string& address) {
  ExposedPort out{port, host_port, address, url_of(address, host_port), false, "", std::nullopt};
  std::string key = relay_key(conversation, port);
  out.relaying = relay_.is_open(key);
  if (!out.relaying) {
    std::lock_guard lock(mutex_);
    auto it = notes_.find(key);
    out.note = it != notes_.end() ? it->second : "not listening in this server";
  }
  out.listening = probe(conversation, port);
  return out;
}

// Whether the port accepts a connection in the running box now; never
// starts or restores one.
std::optional<bool> ExposedPorts::probe(const std::string& conversation, int port) {
  auto lease = manager_->try_acquire(conversation);
  if (!lease) return std::nullopt;
  auto sandbox = lease->sandbox().id();
  try {
    os::UniqueFd fd;
    return connect_inside(sandbox, *lease, port, fd) == 0;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int ExposedPorts::connect_inside(const std::string& sandbox, Lease& lease, int port, os::UniqueFd& connected) {
  int err = 0;
  for (bool v6 : {false, true}) {
    os::UniqueFd fd = take_socket(sandbox, lease);
    err = connect_loopback(fd.get(), port, v6);
    if (err == 0) {
      connected = std::move(fd);
      return 0;
    }
    if (err == EAFNOSUPPORT) return ECONNREFUSED;  // an IPv4-only box has no ::1 to try
    if (err != ECONNREFUSED) return err;
  }
  return err;
}

os::UniqueFd ExposedPorts::take_socket(const std::string& sandbox, Lease& lease) {
  auto client = lease.sandbox().client();
  std::lock_guard lock(mutex_);
  // Sockets of boxes that are gone hold their network namespaces: drop them.
  for (auto it = stocks_.begin(); it != stocks_.end();)
    it = it->second.client.expired() && it->first != sandbox ? stocks_.erase(it) : std::next(it);
  Stock& stock = stocks_[sandbox];
  if (stock.client.lock() != client) stock = Stock{client, {}};
  if (stock.sockets.empty()) stock.sockets = manager_->sockets_inside(lease, kStockBatch);
  os::UniqueFd fd = std::move(stock.sockets.back());
  stock.sockets.pop_back();
  return fd;
}

// On the relay's I/O thread: never blocks (no catalog, no helper fork, no
// wait for the connect).
std::optional<network::RelayTarget> ExposedPorts::quick(const std::string& conversation, int port) {
  auto lease = manager_->try_acquire(conversation);  // counts as use
  if (!lease) return std::nullopt;
  const std::string sandbox = lease->sandbox().id();
  auto client = lease->sandbox().client();
  os::UniqueFd fd;
  {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    auto it = stocks_.find(sandbox);
    if (it == stocks_.end() || it->second.client.lock() != client || it->second.sockets.empty()) return std::nullopt;
    fd = std::move(it->second.sockets.back());
    it->second.sockets.pop_back();
  }
  int err = connect_loopback(fd.get(), port, false, false);
  if (err != 0 && err != EINPROGRESS) return std::nullopt;
  network::RelayTarget target;
  target.socket = std::move(fd);
  return target;
}

network::RelayTarget ExposedPorts::connect(const std::string& conversation, int port) {
  network::RelayTarget target;
  std::string where = "port " + std::to_string(port) + " of conversation '" + conversation + "'";
  // The quick path, a running box (no catalog read); else the catalog says
  // whether there is one to bring back.
  std::optional<Lease> lease = manager_->try_acquire(conversation);
  bool was_running = lease.has_value();
  if (!lease && !manager_->record(conversation)) {
    target.refusal = "agentbox: " + where +
                     " has no sandbox now (it was destroyed): nothing serves this URL. It works again once the "
                     "conversation's next sandbox serves the port.";
    return target;
  }
  try {
    if (!lease) lease.emplace(manager_->acquire(conversation));
  } catch (const std::exception& e) {
    target.refusal = "agentbox: cannot bring back the sandbox of " + where + ": " + e.what();
    return target;
  }
  const std::string sandbox = lease->sandbox().id();
  // Brought back just now: its services are starting again.
  auto deadline = Clock::now() + (was_running ? std::chrono::seconds(0) : kServiceWait);
  int err = 0;
  for (;;) {
    try {
      err = connect_inside(sandbox, *lease, port, target.socket);
    } catch (const std::exception& e) {
      target.refusal = "agentbox: cannot reach " + where + ": " + e.what();
      return target;
    }
    if (err == 0) return target;
    if (err != ECONNREFUSED || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (err == ECONNREFUSED)
    target.refusal = "agentbox: nothing listens on " + where +
                     " inside its sandbox (connection refused there). Start the server in the sandbox, "
                     "listening on 127.0.0.1, ::1 or all addresses at port " + std::to_string(port) + ".";
  else
    target.refusal = os::errno_text("agentbox: cannot connect to " + where + " inside its sandbox", err);
  return target;
}

}  // namespace agentbox::sandbox
