// Sockets made from the host inside a box's network namespace (docs/design.md
// section 10, "Network by policy"). A box in proxy mode keeps no route out;
// its proxy's listener is a TCP socket on 127.0.0.1 *in the box's namespace*,
// made by a short-lived child of the server that joins that namespace (and,
// for a server that is not root, the box's user namespace first, which the
// server's user owns) and hands the socket back over a socketpair. The
// server's proxy then accepts the box's connections itself: no relay inside
// the box, and the box cannot make a socket outside its namespace.
#pragma once

#include "os/unique_fd.h"

#include <cstdint>
#include <cstddef>
#include <sys/types.h>
#include <vector>

namespace agentbox::sandbox {

// Where a box in proxy mode finds its proxy: http://127.0.0.1:3128 (squid's port).
inline constexpr std::uint16_t kProxyPortInside = 3128;

// The first process inside the box: the child of its bwrap (the agent, pid 1
// there). Throws SandboxError when bwrap has no child (the box is gone).
pid_t first_inside(pid_t bwrap);

// A listening TCP socket (close-on-exec, non-blocking) on 127.0.0.1:port in
// the network namespace of process `inside`. Throws SandboxError with the
// step that failed; refuses a process that shares the server's namespace
// (a box with the host network has nothing to listen in).
os::UniqueFd listen_inside(pid_t inside, std::uint16_t port);

// `count` (1 to 16) unconnected TCP sockets (close-on-exec, blocking) made
// in the network namespace of process `inside`, for the host to connect to
// a port there (exposed ports, docs/design.md section 12): IPv6 sockets
// that also reach IPv4 addresses where the box has IPv6, else IPv4 ones. A
// box with the host network gets sockets made here. Throws SandboxError.
std::vector<os::UniqueFd> sockets_inside(pid_t inside, std::size_t count);

}  // namespace agentbox::sandbox
