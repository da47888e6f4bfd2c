// The relay of exposed ports (port_relay.h): one I/O thread runs a
// coroutine per connection; the connect step runs on a small worker pool.
#include "network/port_relay.h"

#include "network/splice.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <spdlog/spdlog.h>

#include <csignal>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace agentbox::network {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kRequestHeadLimit = 16 * 1024;
constexpr auto kRefusalWait = 1s;
constexpr auto kQuickWait = 1s;

struct Connection {
  explicit Connection(tcp::socket socket) : client(std::move(socket)), inside(client.get_executor()) {}
  void close() {
    boost::system::error_code ignored;
    client.close(ignored);
    inside.close(ignored);
  }
  tcp::socket client;
  tcp::socket inside;
};

struct Listener {
  explicit Listener(asio::io_context& io) : acceptor(io) {}
  tcp::acceptor acceptor;
  RelayConnect connect;
  RelayQuick quick;
  RelayActivity activity;
  std::set<std::shared_ptr<Connection>> connections;  // on the I/O thread only
};

std::string http_answer(int status, const char* reason, const std::string& sentence) {
  std::string body = sentence + "\n";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\nX-Agentbox-Relay: refused\r\n\r\n" + body;
}

// Reads what the client sends within `wait` (up to the end of a request
// head), so that closing after the answer does not reset the connection and
// lose the answer.
asio::awaitable<void> read_some_of_request(tcp::socket& socket, std::chrono::steady_clock::duration wait) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(wait);
  std::string head;
  char buffer[4096];
  while (head.size() < kRequestHeadLimit && head.find("\r\n\r\n") == std::string::npos) {
    auto result = co_await (socket.async_read_some(asio::buffer(buffer), kTuple) || timer.async_wait(kTuple));
    if (result.index() == 1) co_return;
    auto [ec, n] = std::get<0>(result);
    if (ec) co_return;
    head.append(buffer, n);
  }
}

asio::awaitable<void> refuse(Connection& connection, std::string answer) {
  co_await read_some_of_request(connection.client, kRefusalWait);
  auto [ec, n] = co_await asio::async_write(connection.client, asio::buffer(answer), kTuple);
  (void)n;
  if (!ec) {
    boost::system::error_code ignored;
    connection.client.shutdown(tcp::socket::shutdown_send, ignored);
    co_await read_some_of_request(connection.client, kRefusalWait);  // until its close, briefly
  }
  connection.close();
}

// One direction. Its end is passed on (a half-close, the other direction
// goes on); a failed write ends both.
asio::awaitable<void> pump(Connection& connection, tcp::socket& from, tcp::socket& to, Clock::time_point& moved) {
  auto result = co_await splice_bytes(from, to, SpliceLimits{std::nullopt, Clock::duration::zero(), &moved});
  if (result.error && !result.reading) {
    connection.close();
    co_return;
  }
  boost::system::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

// Never returns of itself: reports activity while bytes move, until the
// relay's end cancels it.
asio::awaitable<void> report_activity(const Clock::time_point& moved, asio::thread_pool& pool,
                                      const RelayActivity& activity) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  Clock::time_point reported = Clock::now();
  for (;;) {
    timer.expires_after(PortRelay::kActivityEvery);
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) co_return;
    if (moved > reported && activity) {
      reported = moved;
      asio::post(pool, activity);
    }
  }
}

// The connect step as a coroutine for the worker pool. A parameter, not a
// lambda's capture: a coroutine lambda's captures die with the lambda,
// before its body runs.
asio::awaitable<RelayTarget> run_connect(RelayConnect connect) { co_return connect(); }

// Whether the non-blocking connect under way on fd succeeds (at most
// kQuickWait: a loopback connect that takes longer goes the slow way).
asio::awaitable<bool> connected(int fd) {
  auto executor = co_await asio::this_coro::executor;
  asio::posix::stream_descriptor watch(executor, ::dup(fd));
  asio::steady_timer timer(executor);
  timer.expires_after(kQuickWait);
  auto result = co_await (watch.async_wait(asio::posix::stream_descriptor::wait_write, kTuple) ||
                          timer.async_wait(kTuple));
  if (result.index() != 0 || std::get<0>(std::get<0>(result))) co_return false;
  int err = 0;
  socklen_t size = sizeof err;
  co_return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) == 0 && err == 0;
}

tcp protocol_of(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  int type = 0;
  socklen_t type_size = sizeof type;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_size) != 0 || type != SOCK_STREAM ||
      (address.ss_family != AF_INET && address.ss_family != AF_INET6))
    throw std::runtime_error("the relay's connection inside is not a TCP socket");
  return address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
}

}  // namespace

struct PortRelay::Impl {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  asio::thread_pool pool{4};
  std::thread thread;
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<Listener>> listeners;  // guarded by mutex

  asio::awaitable<void> accept_loop(std::shared_ptr<Listener> listener);
  asio::awaitable<void> serve(std::shared_ptr<Listener> listener, std::shared_ptr<Connection> connection);
  // Runs fn on the I/O thread and waits for it.
  void on_io(const std::function<void()>& fn) {
    std::promise<void> done;
    asio::post(io, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
};

asio::awaitable<void> PortRelay::Impl::accept_loop(std::shared_ptr<Listener> listener) {
  for (;;) {
    auto [ec, socket] = co_await listener->acceptor.async_accept(kTuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !listener->acceptor.is_open()) co_return;
      spdlog::warn("exposed port {}: accept failed: {}", listener->acceptor.local_endpoint(ec).port(), ec.message());
      asio::steady_timer pause(io, 100ms);  // out of descriptors: do not spin
      co_await pause.async_wait(kTuple);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto connection = std::make_shared<Connection>(std::move(socket));
    listener->connections.insert(connection);
    asio::co_spawn(io, serve(listener, connection), asio::detached);
  }
}

asio::awaitable<void> PortRelay::Impl::serve(std::shared_ptr<Listener> listener,
                                              std::shared_ptr<Connection> connection) {
  struct Forget {
    Listener& listener;
    std::shared_ptr<Connection> connection;
    ~Forget() {
      connection->close();
      listener.connections.erase(connection);
    }
  } forget{*listener, connection};
  if (listener->connections.size() > kMaxConnections) {
    co_await refuse(*connection, http_answer(503, "Service Unavailable",
                                             "agentbox: this exposed port already relays " +
                                                 std::to_string(kMaxConnections) + " connections; try again later"));
    co_return;
  }
  RelayTarget target;
  // The quick path, here on the I/O thread: a connect already under way.
  if (listener->quick) {
    try {
      if (auto started = listener->quick()) target = std::move(*started);
    } catch (const std::exception&) {
      target = RelayTarget();
    }
    if (target.socket && !co_await connected(target.socket.get())) target = RelayTarget();
  }
  if (!target.socket) {
    RelayConnect connect = listener->connect;
    try {
      target = co_await asio::co_spawn(pool, run_connect(std::move(connect)), asio::use_awaitable);
    } catch (const std::exception& e) {
      target.refusal = e.what();
    }
  }
  if (!connection->client.is_open()) co_return;  // the listener was closed meanwhile
  if (!target.socket && target.refusal.empty()) target.refusal = "agentbox: nothing to relay this connection to";
  if (target.socket) {
    try {
      tcp protocol = protocol_of(target.socket.get());
      connection->inside.assign(protocol, target.socket.get());
      target.socket.release();
    } catch (const std::exception& e) {
      target.refusal = e.what();
    }
  }
  if (!target.refusal.empty()) {
    co_await refuse(*connection, http_answer(502, "Bad Gateway", target.refusal));
    co_return;
  }
  boost::system::error_code ignored;
  connection->inside.set_option(tcp::no_delay(true), ignored);
  loopback_congestion_control(connection->inside);
  if (connection->client.local_endpoint(ignored).address().is_loopback()) loopback_congestion_control(connection->client);
  Clock::time_point moved = Clock::now();
  co_await ((pump(*connection, connection->client, connection->inside, moved) &&
             pump(*connection, connection->inside, connection->client, moved)) ||
            report_activity(moved, pool, listener->activity));
}

PortRelay::PortRelay() : impl_(std::make_unique<Impl>()) {
  std::signal(SIGPIPE, SIG_IGN);  // splice takes no MSG_NOSIGNAL (splice.h)
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

PortRelay::~PortRelay() {
  std::map<std::string, std::shared_ptr<Listener>> listeners;
  {
    std::lock_guard lock(impl_->mutex);
    listeners.swap(impl_->listeners);
  }
  impl_->on_io([&] {
    for (auto& [key, listener] : listeners) {
      boost::system::error_code ignored;
      listener->acceptor.close(ignored);
      for (auto& connection : listener->connections) connection->close();
    }
  });
  impl_->work.reset();
  impl_->io.stop();
  impl_->thread.join();
  impl_->pool.stop();
  impl_->pool.join();
}

std::uint16_t PortRelay::open(const std::string& key, RelayListener spec) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(spec.address, ec);
  if (ec) throw std::invalid_argument("not an IP address: " + spec.address);
  auto listener = std::make_shared<Listener>(impl_->io);
  listener->connect = std::move(spec.connect);
  listener->quick = std::move(spec.quick);
  listener->activity = std::move(spec.activity);
  tcp::endpoint endpoint(address, spec.port);
  auto check = [](const boost::system::error_code& error, const char* step) {
    if (error) throw std::system_error(error.value(), std::system_category(), step);
  };
  check(listener->acceptor.open(endpoint.protocol(), ec), "socket");
  check(listener->acceptor.set_option(tcp::acceptor::reuse_address(true), ec), "SO_REUSEADDR");
  check(listener->acceptor.bind(endpoint, ec), "bind");
  check(listener->acceptor.listen(asio::socket_base::max_listen_connections, ec), "listen");
  std::uint16_t bound = listener->acceptor.local_endpoint(ec).port();
  check(ec, "getsockname");
  close(key);
  {
    std::lock_guard lock(impl_->mutex);
    impl_->listeners[key] = listener;
  }
  asio::co_spawn(impl_->io, impl_->accept_loop(listener), asio::detached);
  return bound;
}

bool PortRelay::close(const std::string& key) {
  std::shared_ptr<Listener> listener;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->listeners.find(key);
    if (it == impl_->listeners.end()) return false;
    listener = it->second;
    impl_->listeners.erase(it);
  }
  impl_->on_io([&] {
    boost::system::error_code ignored;
    listener->acceptor.close(ignored);
    for (auto& connection : listener->connections) connection->close();
  });
  return true;
}

bool PortRelay::is_open(const std::string& key) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->listeners.count(key) > 0;
}

}  // namespace agentbox::network
