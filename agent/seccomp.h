// The seccomp filter of sandboxed code, built with libseccomp. The agent
// installs it on itself before it starts any thread or command, so every
// process in the sandbox inherits it (seccomp filters survive fork and exec
// and cannot be removed). Denied calls fail with EPERM, not a kill, so tools
// that probe for features (e.g. a runtime trying io_uring) fall back.
#pragma once

#include <string>
#include <vector>

namespace agentbox::agent {

// Sets no_new_privs: no exec gains privileges (setuid, file capabilities),
// and an unprivileged process may load a seccomp filter.
void set_no_new_privs();

// Loads the filter for all threads of the process; no_new_privs must be set.
// Throws SandboxError when the kernel refuses it.
void install_seccomp_filter();

// Names of the syscalls the filter refuses outright (others are refused only
// for some arguments: clone/unshare with CLONE_NEWUSER, ioctl TIOCSTI).
const std::vector<std::string>& denied_syscalls();

// Whether this kernel and libseccomp can load a filter; on failure `why` says
// what is missing. Tries it in a short-lived child so the caller stays unfiltered.
bool seccomp_usable(std::string& why);

}  // namespace agentbox::agent
