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
#include <unistd.h>

namespace agentbox::sandbox {

namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot open the box's network proxy: " + what, err));
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

// What the child sends and the parent receives: {step, errno} of a failed
// step, or {0, 0} with the socket attached (SCM_RIGHTS).
struct Report {
  int value[2] = {0, 0};
  char control[CMSG_SPACE(sizeof(int))] = {};
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

// Between fork and _exit: system calls only (the server is multithreaded).
[[noreturn]] void child(int user_fd, int net_fd, bool join_user, std::uint16_t port, int channel) {
  Report report;
  auto fail_step = [&](int step) {
    report.value[0] = step;
    report.value[1] = errno;
    (void)!send(channel, report.value, sizeof report.value, MSG_NOSIGNAL);
    _exit(1);
  };
  if (join_user && setns(user_fd, CLONE_NEWUSER) != 0) fail_step(kJoinUser);
  if (setns(net_fd, CLONE_NEWNET) != 0) fail_step(kJoinNet);
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) fail_step(kSocket);
  int one = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail_step(kBind);
  if (listen(sock, 128) != 0) fail_step(kListen);
  cmsghdr* header = CMSG_FIRSTHDR(&report.message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &sock, sizeof sock);
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

os::UniqueFd listen_inside(pid_t inside, std::uint16_t port) {
  std::string ns = "/proc/" + std::to_string(inside) + "/ns/";
  os::UniqueFd net(open((ns + "net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!net) fail("opening " + ns + "net", errno);
  // The user namespace that owns the network namespace: bwrap may run the
  // box in one nested below it, where no right over the network is held.
  os::UniqueFd user(ioctl(net.get(), NS_GET_USERNS));
  if (!user) fail("finding the user namespace of " + ns + "net", errno);
  if (same_file(net.get(), "/proc/self/ns/net"))
    throw SandboxError(codes::kSandboxStartFailed,
                       "cannot open the box's network proxy: the box shares the server's network (--network host)");
  // A root server may enter any namespace from its own user namespace; any
  // other user joins the box's (it owns it) to have the right there.
  bool join_user = geteuid() != 0 && !same_file(user.get(), "/proc/self/ns/user");
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair", errno);
  os::UniqueFd mine(pair[0]), theirs(pair[1]);
  pid_t pid = fork();
  if (pid == 0) child(user.get(), net.get(), join_user, port, theirs.get());
  if (pid < 0) fail("fork", errno);
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
  if (got < 0) fail("waiting for the socket", err);
  cmsghdr* header = CMSG_FIRSTHDR(&report.message);
  if (report.value[0] != 0 || !header || header->cmsg_type != SCM_RIGHTS) {
    if (report.value[0] == 0) fail("the helper returned no socket", EPROTO);
    fail(step_name(report.value[0]), report.value[1]);
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof fd);
  os::UniqueFd socket_fd(fd);
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) fail("making the socket non-blocking", errno);
  return socket_fd;
}

}  // namespace agentbox::sandbox
