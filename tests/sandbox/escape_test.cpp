// The escape suite: each attempt tries a way out of the sandbox and must
// fail. An attempt is a shell command that prints ESCAPED if it got through
// and RAN at its end (so an attempt that could not even run is noticed).
// Host-side checks confirm what the sandbox could not see or change.
#include "fixture.h"

#include <arpa/inet.h>
#include <atomic>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

// A TCP listener on the host's loopback that records whether anyone connected.
struct HostListener {
  int fd = -1;
  int port = 0;
  std::atomic<bool> connected{false};
  std::thread thread;
  HostListener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    listen(fd, 4);
    thread = std::thread([this] {
      int c = accept(fd, nullptr, nullptr);
      if (c >= 0) {
        connected = true;
        close(c);
      }
    });
  }
  ~HostListener() {
    shutdown(fd, SHUT_RDWR);
    close(fd);
    thread.join();
  }
};

// python3 -c: call a syscall by number with zero arguments; print ESCAPED if it worked.
std::string syscall_attempt(const std::string& name, int number) {
  return "python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.syscall(" + std::to_string(number) +
         ",0,0,0,0,0); print('" + name + "', r, os.strerror(ctypes.get_errno())); print('ESCAPED' if r >= 0 else 'refused')\"";
}

}  // namespace

TEST_CASE("escape attempts all fail") {
  SandboxFixture f;
  // Canaries on the host.
  std::string canary = "agentbox-canary-" + std::to_string(getpid());
  std::string root_canary = "/root/" + canary;
  bool root = geteuid() == 0;
  if (root) std::ofstream(root_canary) << "secret-root\n";
  else WARN("not root: the /root canary is not planted (the /root and host-home attempts still run)");
  const char* home_env = std::getenv("HOME");
  std::string home_canary = std::string(home_env && *home_env && std::string(home_env) != "/" ? home_env : "/tmp") + "/" + canary;
  std::ofstream(home_canary) << "secret-home\n";
  HostListener listener;
  pid_t victim = fork();
  if (victim == 0) {
    execl("/bin/sleep", "sleep", "300", nullptr);
    _exit(1);
  }
  // Another conversation's sandbox with a secret of its own.
  f.exec("echo other-secret > /workspace/secret-b.txt", {}, "other");
  std::string other_dir = f.manager->find("other")->dirs().workspace().string();
  std::string state = f.state_dir.string();
  // Every entry of the host's /run (sockets of docker, dbus, systemd...) must be absent inside.
  std::string host_run_probe;
  for (const auto& entry : fs::directory_iterator("/run")) {
    std::string name = entry.path().filename().string();
    if (name.rfind("agentbox", 0) == 0 || name == "mount") continue;  // what the sandbox itself makes
    host_run_probe += "test -e '/run/" + name + "' && echo ESCAPED; ";
  }

  std::vector<std::pair<std::string, std::string>> attempts = {
      {"read the /root canary", "cat " + root_canary + " 2>/dev/null && echo ESCAPED"},
      {"list /root", "ls -a /root 2>/dev/null | grep -q agentbox-canary && echo ESCAPED"},
      {"read the host home canary", "cat " + home_canary + " 2>/dev/null | grep -q secret && echo ESCAPED"},
      {"find the canary anywhere", "find / -xdev -name '" + canary + "' 2>/dev/null | grep -q . && echo ESCAPED"},
      {"write into /usr", "touch /usr/escape-" + canary + " 2>/dev/null && echo ESCAPED"},
      {"write into /etc", "echo x >> /etc/passwd 2>/dev/null && echo ESCAPED"},
      {"read host files via /proc/1/root", "cat /proc/1/root" + root_canary + " 2>/dev/null && echo ESCAPED"},
      {"see host processes", "test $(ps -e --no-headers | wc -l) -gt 20 && echo ESCAPED; pgrep -f sandbox_tests && echo ESCAPED"},
      {"kill a host process", "kill -9 " + std::to_string(victim) + " 2>/dev/null; true"},
      {"ptrace", syscall_attempt("ptrace", 101)},
      {"mount a tmpfs", "mount -t tmpfs none /mnt 2>/dev/null && echo ESCAPED; " + syscall_attempt("mount", 165)},
      {"keyctl", syscall_attempt("keyctl", 250)},
      {"add_key", syscall_attempt("add_key", 248)},
      {"bpf", syscall_attempt("bpf", 321)},
      {"perf_event_open", syscall_attempt("perf_event_open", 298)},
      {"userfaultfd", syscall_attempt("userfaultfd", 323)},
      {"open_by_handle_at (shocker)", syscall_attempt("open_by_handle_at", 304)},
      {"load a kernel module", syscall_attempt("init_module", 175)},
      {"nested user namespace", "unshare -Ur true 2>/dev/null && echo ESCAPED; python3 -c \"import ctypes; l=ctypes.CDLL(None); "
                                "print('ESCAPED' if l.unshare(0x10000000)==0 else 'refused')\""},
      {"nested bwrap", "bwrap --ro-bind / / true 2>/dev/null && echo ESCAPED"},
      {"connect to a host loopback listener", "timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" +
                                                  std::to_string(listener.port) + "' 2>/dev/null && echo ESCAPED"},
      {"reach the internet", "timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null && echo ESCAPED"},
      {"raw block devices", "ls /dev | grep -E '^(sd|vd|nvme|xvd|mem$|kmem|port)' && echo ESCAPED; mknod /tmp/blk b 8 0 2>/dev/null && echo ESCAPED"},
      {"setuid binaries gain nothing", "grep -q 'NoNewPrivs:.1' /proc/self/status || echo ESCAPED; "
                                       "su -c 'echo ESCAPED' </dev/null 2>/dev/null; sudo -n echo ESCAPED 2>/dev/null; true"},
      {"TIOCSTI into a terminal", "python3 -c \"import fcntl,termios,sys\ntry:\n fcntl.ioctl(sys.stdin.fileno(), "
                                  "termios.TIOCSTI, b'x'); print('ESCAPED')\nexcept OSError as e: print('refused', e)\"; "
                                  "test -e /dev/tty && (exec 3</dev/tty) 2>/dev/null && echo tty-open"},
      {"symlink to a host path", "ln -sf /root /workspace/rootlink && ls -a /workspace/rootlink/ 2>/dev/null | grep -q canary && echo ESCAPED"},
      {"symlink to the state directory", "ln -sf " + state + " /workspace/statelink && ls /workspace/statelink/ 2>/dev/null | grep -q . && echo ESCAPED"},
      {"read another sandbox", "cat " + other_dir + "/secret-b.txt 2>/dev/null && echo ESCAPED; find / -xdev -name secret-b.txt 2>/dev/null | grep -q . && echo ESCAPED"},
      {"shadow file", "grep -qs root: /etc/shadow && echo ESCAPED; grep -qs root: /etc/gshadow && echo ESCAPED"},
      {"host entries and sockets in /run", host_run_probe + "find / -xdev -type s 2>/dev/null | grep -v '^/run/agentbox' | grep -q . && echo ESCAPED"},
      {"capabilities", "grep -q 'CapEff:.0000000000000000' /proc/self/status || echo ESCAPED"},
      {"chroot", "chroot / true 2>/dev/null && echo ESCAPED"},
      {"change the hostname", "hostname evil-host 2>/dev/null && echo ESCAPED"},
      {"write /proc/sys", "echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo ESCAPED"},
      {"reach /sys", "ls /sys/fs/cgroup 2>/dev/null | grep -q . && echo ESCAPED"},
      {"run as root inside", "test $(id -u) = 0 && echo ESCAPED"},
  };
  REQUIRE(attempts.size() >= 25);
  for (const auto& [name, command] : attempts) {
    INFO("attempt: " << name << "\ncommand: " << command);
    auto r = f.exec(command + "; echo RAN", {{"timeout_ms", 20000}});
    std::string out = r["stdout"];
    INFO("stdout: " << out << "\nstderr: " << r["stderr"].get<std::string>());
    CHECK(out.find("ESCAPED") == std::string::npos);
    CHECK(out.find("RAN") != std::string::npos);
    CHECK(out.find("tty-open") == std::string::npos);
  }
  // Host-side confirmations.
  CHECK_FALSE(listener.connected.load());
  CHECK(::kill(victim, 0) == 0);  // the host process is alive
  CHECK_FALSE(fs::exists("/usr/escape-" + canary));
  std::string host_name(256, '\0');
  gethostname(host_name.data(), host_name.size());
  CHECK(host_name.find("evil-host") == std::string::npos);
  // Files the sandbox writes are not owned by host root.
  f.exec("echo mine > /workspace/owned.txt");
  struct stat st;
  REQUIRE(stat((f.manager->find("test")->dirs().workspace() / "owned.txt").c_str(), &st) == 0);
  if (root) CHECK(st.st_uid != 0);
  else CHECK(st.st_uid == geteuid());

  ::kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  if (root) fs::remove(root_canary);
  fs::remove(home_canary);
}

namespace {

// Python run in the box: ctypes' syscall with every argument a C long (a
// plain int would leave the upper half of a register undefined).
const char* kSyscallPrelude = R"PY(import ctypes, errno, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r, ctypes.get_errno()
def report(name, escaped, detail=''):
    print(('ESCAPED ' if escaped else 'refused ') + name + ': ' + detail, flush=True)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local, remote = iovec(ctypes.cast(buf, ctypes.c_void_p), 8), iovec(0x400000, 8)
)PY";

// The ways to pid 1 (the agent: its stdout is the pipe the server believes)
// and, against a dumpable child of the probe's own, the calls seccomp must
// refuse whatever the target. x86-64 numbers: ptrace 101, process_vm_readv
// 310, process_vm_writev 311, pidfd_getfd 438.
const char* kWallProbe = R"PY(
for path, mode in (('/proc/1/fd/1', os.O_WRONLY), ('/proc/1/fd/0', os.O_RDONLY), ('/proc/1/mem', os.O_RDONLY),
                   ('/proc/1/mem', os.O_RDWR)):
    try:
        os.close(os.open(path, mode))
        report('open %s mode %d' % (path, mode), True)
    except OSError as e:
        report('open %s mode %d' % (path, mode), False, e.strerror)
try:
    report('list /proc/1/fd', True, str(os.listdir('/proc/1/fd')))
except OSError as e:
    report('list /proc/1/fd', False, e.strerror)
child = subprocess.Popen(['sleep', '30'])
for pid, whose in ((1, 'the agent'), (child.pid, 'own child')):
    pidfd = os.pidfd_open(pid)
    for target in (0, 1, 2):
        r, e = sc(438, pidfd, target, 0)
        report('pidfd_getfd(%s, %d)' % (whose, target), r >= 0, os.strerror(e))
    for nr, name in ((311, 'process_vm_writev'), (310, 'process_vm_readv')):
        r, e = sc(nr, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        # EFAULT would mean the access was granted and only the address was bad.
        report('%s(%s)' % (name, whose), r >= 0 or e not in (errno.EPERM, errno.EACCES), os.strerror(e))
    for request, name in ((16, 'PTRACE_ATTACH'), (0x4206, 'PTRACE_SEIZE')):
        r, e = sc(101, request, pid, 0, 0)
        if r >= 0:
            sc(101, 17, pid, 0, 0)  # PTRACE_DETACH: let the agent answer
        report('ptrace %s(%s)' % (name, whose), r >= 0, os.strerror(e))
child.kill()
print('PROBED', flush=True)
)PY";

// Writes replies for every id the server might be waiting on through each
// way to the agent's stdout it can open.
const char* kForger = R"PY(
def line(i):
    return (json.dumps({'jsonrpc': '2.0', 'id': i, 'result': {'stdout': 'FORGED\n', 'stderr': '', 'exit_code': 0,
                        'success': True, 'timed_out': False, 'duration_ms': 1}}) + '\n').encode()
fds = []
try:
    fds.append(os.open('/proc/1/fd/1', os.O_WRONLY))
except OSError as e:
    print('open', e)
try:
    r, e = sc(438, os.pidfd_open(1), 1, 0)
    if r >= 0:
        fds.append(r)
except OSError as e:
    print('pidfd', e)
written = 0
for fd in fds:
    for i in range(1, 300):
        os.write(fd, line(i))
        written += 1
print('forged', written, flush=True)
)PY";

std::string python_in_box(const std::string& file, const char* body) {
  return "cat > " + file + " <<'AGENTBOX_PY'\n" + kSyscallPrelude + body + "AGENTBOX_PY\n";
}

}  // namespace

TEST_CASE("box code cannot reach the agent through /proc or ptrace or pidfd_getfd") {
  SandboxFixture f;
  f.exec(python_in_box("/tmp/wall_probe.py", kWallProbe));
  auto r = f.exec("python3 /tmp/wall_probe.py", {{"timeout_ms", 30000}});
  std::string out = r["stdout"];
  INFO("stdout: " << out << "\nstderr: " << r["stderr"].get<std::string>());
  CHECK(out.find("PROBED") != std::string::npos);
  CHECK(out.find("refused pidfd_getfd(the agent, 1)") != std::string::npos);
  CHECK(out.find("refused pidfd_getfd(own child, 1)") != std::string::npos);
  CHECK(out.find("refused ptrace PTRACE_ATTACH(own child)") != std::string::npos);
  CHECK(out.find("ESCAPED") == std::string::npos);
}

TEST_CASE("a reply forged by box code cannot answer a call") {
  SandboxFixture f;
  f.exec(python_in_box("/tmp/forge.py", kForger));
  // The forger writes while the real command is still running.
  f.exec("(sleep 1; python3 /tmp/forge.py > /tmp/forge.out 2>&1) >/dev/null 2>&1 &");
  auto started = std::chrono::steady_clock::now();
  auto r = f.exec("sleep 3; echo real");
  auto took = std::chrono::steady_clock::now() - started;
  CHECK(r["stdout"] == "real\n");
  CHECK(took >= std::chrono::milliseconds(2900));
  auto forger = f.exec("sleep 1; cat /tmp/forge.out")["stdout"].get<std::string>();
  INFO("forger: " << forger);
  CHECK(forger.find("forged 0") != std::string::npos);
  // The sandbox still works (nothing forged got through to confuse it).
  CHECK(f.exec("echo after")["stdout"] == "after\n");
}
