#include "agent/seccomp.h"

#include "os/errno_text.h"
#include "contract/errors.h"

#include <seccomp.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

namespace agentbox::agent {

namespace {

// Calls with no place in a sandbox. Why each group:
// - keys: the kernel keyring is not namespaced (keyctl/add_key/request_key).
// - bpf, perf_event_open, userfaultfd, io_uring: large attack surface, a long
//   CVE record, and nothing a build or test needs.
// - module and kexec calls, reboot, swap, acct, syslog, clock setting: host-wide.
// - mount family and pivot_root: the sandbox's mounts are fixed by bwrap.
// - ptrace, process_vm_* and pidfd_getfd: no process may inspect another or
//   take its descriptors, least of all the agent's pipe to the server (the
//   agent is not dumpable as well; docs/sandbox.md, "The wall between host
//   and box").
// - open_by_handle_at: the "shocker" container escape (opens host inodes by handle).
// - setns: joining other namespaces.
const std::vector<std::string> kDenied = {
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "syslog", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "quotactl", "lookup_dcookie",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "open_by_handle_at", "name_to_handle_at", "setns",
    "iopl", "ioperm", "vhangup", "uselib",
};

struct ContextDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Context = std::unique_ptr<void, ContextDeleter>;

void check(int rc, const std::string& what) {
  if (rc < 0) throw SandboxError(codes::kInternal, "seccomp: " + what + ": " + std::strerror(-rc));
}

Context build_filter() {
  Context ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw SandboxError(codes::kInternal, "seccomp: cannot create a filter context");
  // 32-bit x86 calls have other numbers; without this arch they would be killed
  // by the default bad-arch action, with it they are filtered like native ones.
  if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
    int rc = seccomp_arch_add(ctx.get(), SCMP_ARCH_X86);
    if (rc < 0 && rc != -EEXIST) check(rc, "add x86 arch");
  }
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1), "set TSYNC");
  const auto deny = SCMP_ACT_ERRNO(EPERM);
  for (const auto& name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    check(seccomp_rule_add(ctx.get(), deny, nr, 0), "deny " + name);
  }
  // Nested user namespaces would give sandboxed code capabilities over new
  // namespaces (and a large kernel surface). The flags are the first argument
  // of clone and unshare on x86-64 and i386 alike.
  for (int nr : {SCMP_SYS(clone), SCMP_SYS(unshare)}) {
    check(seccomp_rule_add(ctx.get(), deny, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
          "deny CLONE_NEWUSER");
  }
  // clone3 passes flags in memory that seccomp cannot read: ENOSYS makes libc
  // fall back to clone, which the rule above can check.
  int clone3 = seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR) check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), clone3, 0), "clone3");
  // TIOCSTI/TIOCLINUX push input into a terminal: the classic escape from a
  // sandbox that shares the caller's tty (CVE-2017-5226 for bwrap itself).
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    check(seccomp_rule_add(ctx.get(), deny, SCMP_SYS(ioctl), 1,
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, request)),
          "deny ioctl");
  }
  // A file lease (fcntl F_SETLEASE) on a workspace file held the root snapshot
  // helper for the lease-break time (45 s) per file: nothing in a box needs
  // one. cmd is an unsigned int: only its low 32 bits count. fcntl64 is the
  // i386 spelling (docs/design.md section 8, "Snapshots a box cannot hang").
  for (const char* name : {"fcntl", "fcntl64"}) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    check(seccomp_rule_add(ctx.get(), deny, nr, 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, F_SETLEASE)),
          std::string("deny ") + name + " F_SETLEASE");
  }
  return ctx;
}

}  // namespace

const std::vector<std::string>& denied_syscalls() { return kDenied; }

void set_no_new_privs() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    throw SandboxError(codes::kInternal, os::errno_text("prctl(PR_SET_NO_NEW_PRIVS)", errno));
}

void install_seccomp_filter() {
  Context ctx = build_filter();
  check(seccomp_load(ctx.get()), "load filter");
}

bool seccomp_usable(std::string& why) {
  pid_t child = fork();
  if (child < 0) {
    why = os::errno_text("fork", errno);
    return false;
  }
  if (child == 0) {
    try {
      set_no_new_privs();
      install_seccomp_filter();
    } catch (...) {
      _exit(2);
    }
    // The filter must actually refuse keyctl.
    _exit(syscall(SCMP_SYS(keyctl), 0, 0, 0, 0, 0) == -1 && errno == EPERM ? 0 : 3);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  why = WIFEXITED(status) && WEXITSTATUS(status) == 3
            ? "a seccomp filter loaded but did not refuse keyctl"
            : "the kernel refused to load a seccomp filter (is CONFIG_SECCOMP_FILTER enabled?)";
  return false;
}

}  // namespace agentbox::agent
