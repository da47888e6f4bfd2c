#include "sandbox/net_namespace.h"

#include "contract/errors.h"
#include "os/errno_text.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdexcept>
#include <unistd.h>
#include <vector>

namespace agentbox::sandbox {

namespace {

[[noreturn]] void fail(const char* purpose, const std::string& what, int err) {
  throw SandboxError(codes::kSandboxStartFailed, os::errno_text(std::string(purpose) + ": " + what, err));
}

// The steps the child reports back when one fails (it sends {step, errno}).
enum Step : int { kJoinUser = 1, kJoinNet, kSocket, kBind, kListen, kSend };

const char* step_name(int step) {
  switch (step) {
    case kJoinUser: return "joining the box's user namespace";
    case kJoinNet: return "joining the box's network namespace";
    case kSocket: return "making the socket";
    case kBind: return "binding 127.0.0.1 in the box";
    case kListen: return "listening";
    default: return "handing the socket back";
  }
}

constexpr std::size_t kMaxSockets = 16;

// What the child sends and the parent receives: {step, errno} of a failed
// step, or {0, 0} with the sockets attached (SCM_RIGHTS).
struct Report {
  int value[2] = {0, 0};
  char control[CMSG_SPACE(sizeof(int) * kMaxSockets)] = {};
  iovec data{value, sizeof value};
  msghdr message{};
  Report() {
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
  }
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;
};

// An unconnected stream socket for the host to connect to a port with: an
// IPv6 one that reaches IPv4 addresses too where the namespace has IPv6,
// else IPv4; -1 with errno. System calls only: the helper child uses it.
int relay_socket() {
  int sock = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock >= 0) {
    int zero = 0;
    setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    return sock;
  }
  return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

// Between fork and _exit: system calls only (the server is multithreaded).
// port != 0: one socket listening on 127.0.0.1:port; port 0: `count`
// unconnected stream sockets (IPv6 and dual-stack where the box has IPv6,
// else IPv4) for the host to connect to ports inside.
[[noreturn]] void child(int user_fd, int net_fd, bool join_user, std::uint16_t port, std::size_t count, int channel) {
  Report report;
  auto fail_step = [&](int step) {
    report.value[0] = step;
    report.value[1] = errno;
    (void)!send(channel, report.value, sizeof report.value, MSG_NOSIGNAL);
    _exit(1);
  };
  if (join_user && setns(user_fd, CLONE_NEWUSER) != 0) fail_step(kJoinUser);
  if (setns(net_fd, CLONE_NEWNET) != 0) fail_step(kJoinNet);
  int socks[kMaxSockets];
  if (port == 0) {
    for (std::size_t i = 0; i < count; ++i)
      if ((socks[i] = relay_socket()) < 0) fail_step(kSocket);
  } else {
    count = 1;
    socks[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (socks[0] < 0) fail_step(kSocket);
    int one = 1;
    setsockopt(socks[0], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(socks[0], reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail_step(kBind);
    if (listen(socks[0], 128) != 0) fail_step(kListen);
  }
  cmsghdr* header = CMSG_FIRSTHDR(&report.message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(header), socks, sizeof(int) * count);
  report.message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  if (sendmsg(channel, &report.message, MSG_NOSIGNAL) < 0) fail_step(kSend);
  _exit(0);
}

bool same_file(int fd, const char* path) {
  struct stat a{}, b{};
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

pid_t first_inside(pid_t bwrap) {
  std::string path = "/proc/" + std::to_string(bwrap) + "/task/" + std::to_string(bwrap) + "/children";
  std::ifstream in(path);
  pid_t pid = -1;
  if (!(in >> pid) || pid <= 0)
    throw SandboxError(codes::kSandboxFailed, "the box has no process inside (bwrap " + std::to_string(bwrap) +
                                                  " has no child): it has ended");
  return pid;
}

namespace {

// What the helper child made in the box's network namespace.
std::vector<os::UniqueFd> made_inside(pid_t inside, std::uint16_t port, std::size_t count, const char* purpose) {
  std::string ns = "/proc/" + std::to_string(inside) + "/ns/";
  os::UniqueFd net(open((ns + "net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!net) fail(purpose, "opening " + ns + "net", errno);
  // The user namespace that owns the network namespace: bwrap may run the
  // box in one nested below it, where no right over the network is held.
  os::UniqueFd user(ioctl(net.get(), NS_GET_USERNS));
  if (!user) fail(purpose, "finding the user namespace of " + ns + "net", errno);
  if (same_file(net.get(), "/proc/self/ns/net")) {
    if (port != 0)
      throw SandboxError(codes::kSandboxStartFailed,
                         "cannot open the box's network proxy: the box shares the server's network (--network host)");
    // The box has the host's network: sockets made here reach it alike.
    std::vector<os::UniqueFd> made;
    for (std::size_t i = 0; i < count; ++i) {
      os::UniqueFd sock(relay_socket());
      if (!sock) fail(purpose, "making a socket", errno);
      made.push_back(std::move(sock));
    }
    return made;
  }
  // A root server may enter any namespace from its own user namespace; any
  // other user joins the box's (it owns it) to have the right there.
  bool join_user = geteuid() != 0 && !same_file(user.get(), "/proc/self/ns/user");
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail(purpose, "socketpair", errno);
  os::UniqueFd mine(pair[0]), theirs(pair[1]);
  pid_t pid = fork();
  if (pid == 0) child(user.get(), net.get(), join_user, port, count, theirs.get());
  if (pid < 0) fail(purpose, "fork", errno);
  theirs = os::UniqueFd();
  Report report;
  pollfd ready{mine.get(), POLLIN, 0};
  ssize_t got = -1;
  int err = ETIMEDOUT;
  if (poll(&ready, 1, 5000) == 1) {
    got = recvmsg(mine.get(), &report.message, MSG_CMSG_CLOEXEC);
    err = errno;
  }
  int status = 0;
  if (got < 0) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got < 0) fail(purpose, "waiting for the socket", err);
  cmsghdr* header = CMSG_FIRSTHDR(&report.message);
  if (report.value[0] != 0 || !header || header->cmsg_type != SCM_RIGHTS) {
    if (report.value[0] == 0) fail(purpose, "the helper returned no socket", EPROTO);
    fail(purpose, step_name(report.value[0]), report.value[1]);
  }
  std::size_t received = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  std::vector<os::UniqueFd> made;
  for (std::size_t i = 0; i < received && i < kMaxSockets; ++i) {
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(header) + i * sizeof fd, sizeof fd);
    made.emplace_back(fd);
  }
  if (made.size() != (port != 0 ? 1 : count)) fail(purpose, "the helper returned too few sockets", EPROTO);
  return made;
}

}  // namespace

os::UniqueFd listen_inside(pid_t inside, std::uint16_t port) {
  auto made = made_inside(inside, port, 1, "cannot open the box's network proxy");
  int fd = made[0].get();
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) fail("cannot open the box's network proxy", "making the socket non-blocking", errno);
  return std::move(made[0]);
}

std::vector<os::UniqueFd> sockets_inside(pid_t inside, std::size_t count) {
  if (count == 0 || count > kMaxSockets) throw std::invalid_argument("sockets_inside: 1 to 16 sockets");
  return made_inside(inside, 0, count, "cannot reach a port inside the box");
}

}  // namespace agentbox::sandbox
