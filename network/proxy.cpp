// The egress proxy (proxy.h): one I/O thread, a coroutine per connection
// (proxy_http.cpp, proxy_tunnel.cpp). With one thread the boxes and their
// links need no locks; what it costs is measured by bench/network_bench.mjs
// (docs/benchmarks.md, "Network proxy"). Beast parses and writes HTTP; bodies
// and tunnels whose bytes pass unchanged are spliced (splice.h); the first
// TLS record of a tunnel is read by OpenSSL (tls_hello.h); an intercepted
// host's TLS is OpenSSL's through Asio (proxy_intercept.cpp).
#include "network/proxy.h"
#include "network/splice.h"

#include "network/proxy_io.h"
#include "network/tls_hello.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace agentbox::network {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {
constexpr std::size_t kKeptDenials = 64;
constexpr std::size_t kMaxConnections = 256;  // per sandbox
constexpr auto kAcceptPause = 100ms;          // after a failed accept (EMFILE would otherwise spin)


// The listener's protocol, read from the socket; a sentence when it is not
// a listening TCP socket.
tcp listener_protocol(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  int listening = 0, type = 0;
  socklen_t size = sizeof listening;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      (address.ss_family != AF_INET && address.ss_family != AF_INET6))
    throw std::runtime_error("the proxy's listener for a box is not an IP socket");
  socklen_t type_size = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_size) != 0 || type != SOCK_STREAM ||
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening)
    throw std::runtime_error("the proxy's listener for a box is not a listening TCP socket");
  return address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
}
}  // namespace

struct Proxy::Impl {
  struct Box {
    std::shared_ptr<const Policy> policy;
    std::shared_ptr<tcp::acceptor> acceptor;
    std::set<std::shared_ptr<Link>> connections;
    std::uint64_t generation = 0;
  };

  std::unique_ptr<Interceptor> interceptor;  // null without a CA
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::thread thread;
  // Touched on the I/O thread only (attach and detach post there).
  std::map<std::string, Box> boxes;
  std::uint64_t generations = 0;
  mutable std::mutex denials_mutex;
  std::map<std::string, std::deque<Denial>> denials;

  void deny(const std::string& sandbox, const std::string& host, std::uint16_t port, const std::string& reason) {
    spdlog::info("sandbox {}: network denied {}:{}: {}", sandbox, host, port, reason);
    std::lock_guard lock(denials_mutex);
    auto& list = denials[sandbox];
    list.push_back({host, port, reason, std::chrono::system_clock::now()});
    while (list.size() > kKeptDenials) list.pop_front();
  }

  asio::awaitable<void> accept_loop(std::string sandbox, std::shared_ptr<tcp::acceptor> acceptor,
                                    std::uint64_t generation);
  void close_box(Box& box) {
    boost::system::error_code ec;
    if (box.acceptor) box.acceptor->close(ec);
    for (const auto& link : box.connections) link->close();
    box.connections.clear();
  }
};

asio::awaitable<void> Proxy::Impl::accept_loop(std::string sandbox, std::shared_ptr<tcp::acceptor> acceptor,
                                               std::uint64_t generation) {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
    auto found = boxes.find(sandbox);
    if (found == boxes.end() || found->second.generation != generation) co_return;  // detached or replaced
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
      spdlog::warn("sandbox {}: proxy accept failed: {}", sandbox, ec.message());
      asio::steady_timer pause(io, kAcceptPause);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    Box& box = found->second;
    if (box.connections.size() >= kMaxConnections) {
      deny(sandbox, "", 0,
           "more than " + std::to_string(kMaxConnections) +
               " connections open through the proxy at once; this one was refused");
      continue;  // the socket closes as it goes out of scope
    }
    loopback_congestion_control(socket);
    auto link = std::make_shared<Link>(std::move(socket));
    box.connections.insert(link);
    Session session{sandbox, box.policy, interceptor.get(),
                    [this](const std::string& s, const std::string& h, std::uint16_t p, const std::string& r) {
                      deny(s, h, p, r);
                    }};
    asio::co_spawn(io, serve_connection(std::move(session), link),
                   [this, sandbox, generation, link](std::exception_ptr failure) {
                     if (failure) {
                       try {
                         std::rethrow_exception(failure);
                       } catch (const std::exception& e) {
                         spdlog::debug("sandbox {}: proxy connection ended: {}", sandbox, e.what());
                       }
                     }
                     auto it = boxes.find(sandbox);
                     if (it != boxes.end() && it->second.generation == generation) it->second.connections.erase(link);
                     link->close();
                   });
  }
}

Proxy::Proxy(std::shared_ptr<CertificateAuthority> ca) : impl_(std::make_unique<Impl>()) {
  // splice(2) into a socket the box has closed raises SIGPIPE (it takes no
  // MSG_NOSIGNAL): the proxy's process must take it as EPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  if (ca) impl_->interceptor = std::make_unique<Interceptor>(std::move(ca));
  impl_->thread = std::thread([io = &impl_->io] {
    for (;;) {
      try {
        io->run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("egress proxy: {}", e.what());  // a handler's failure ends that connection, not the proxy
      }
    }
  });
}

Proxy::~Proxy() {
  asio::post(impl_->io, [impl = impl_.get()] {
    for (auto& [id, box] : impl->boxes) impl->close_box(box);
    impl->boxes.clear();
    impl->work.reset();
  });
  // Every link is closed, so what each connection awaited fails now and the
  // thread's run() returns once their coroutines have unwound.
  impl_->thread.join();
}

void Proxy::attach(const std::string& sandbox, int listener_fd, std::shared_ptr<const Policy> policy) {
  auto acceptor = std::make_shared<tcp::acceptor>(impl_->io);
  boost::system::error_code ec;
  try {
    if (!policy) throw std::runtime_error("the proxy was given no policy for sandbox " + sandbox);
    acceptor->assign(listener_protocol(listener_fd), listener_fd, ec);
  } catch (...) {
    ::close(listener_fd);
    throw;
  }
  if (ec) {
    ::close(listener_fd);
    throw std::runtime_error("the proxy cannot take the box's listener: " + ec.message());
  }
  std::promise<void> done;
  asio::post(impl_->io, [this, sandbox, acceptor, policy = std::move(policy), &done]() mutable {
    Impl::Box& box = impl_->boxes[sandbox];
    impl_->close_box(box);
    box.policy = std::move(policy);
    box.acceptor = acceptor;
    box.generation = ++impl_->generations;
    asio::co_spawn(impl_->io, impl_->accept_loop(sandbox, acceptor, box.generation), asio::detached);
    done.set_value();
  });
  done.get_future().wait();
}

void Proxy::detach(const std::string& sandbox) {
  std::promise<void> done;
  asio::post(impl_->io, [this, sandbox, &done] {
    if (auto found = impl_->boxes.find(sandbox); found != impl_->boxes.end()) {
      impl_->close_box(found->second);
      impl_->boxes.erase(found);
    }
    done.set_value();
  });
  done.get_future().wait();
}

void Proxy::forget(const std::string& sandbox) {
  detach(sandbox);
  std::lock_guard lock(impl_->denials_mutex);
  impl_->denials.erase(sandbox);
}

std::shared_ptr<CertificateAuthority> Proxy::authority() const {
  return impl_->interceptor ? impl_->interceptor->authority() : nullptr;
}

std::vector<Denial> Proxy::denials(const std::string& sandbox, std::chrono::system_clock::time_point since) const {
  std::lock_guard lock(impl_->denials_mutex);
  std::vector<Denial> out;
  auto found = impl_->denials.find(sandbox);
  if (found == impl_->denials.end()) return out;
  for (const auto& denial : found->second)
    if (denial.at >= since) out.push_back(denial);
  return out;
}

}  // namespace agentbox::network
