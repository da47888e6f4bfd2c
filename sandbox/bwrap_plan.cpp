#include "sandbox/bwrap_plan.h"

#include "sandbox/host_etc.h"

#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

// /bin, /lib... are symlinks into /usr on merged-/usr systems and real
// directories elsewhere; mirror whichever the host has.
void add_os_dir(std::vector<std::string>& argv, const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    if (!ec) argv.insert(argv.end(), {"--symlink", target.string(), path});
  } else if (S_ISDIR(st.st_mode)) {
    argv.insert(argv.end(), {"--ro-bind", path, path});
  }
}

bool is_under(const fs::path& child, const fs::path& parent) {
  auto c = child.lexically_normal(), p = parent.lexically_normal();
  auto mismatch = std::mismatch(p.begin(), p.end(), c.begin(), c.end());
  return mismatch.first == p.end();
}

const std::vector<std::string> kOsDirs = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"};

}  // namespace

const std::vector<std::string>& masked_etc_files() {
  static const std::vector<std::string> files = {
      "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers",
      "/etc/security/opasswd", "/etc/machine-id",
  };
  return files;
}

std::vector<std::string> bwrap_argv(const BwrapOptions& o) {
  std::vector<std::string> argv = {o.bwrap};
  auto add = [&argv](std::initializer_list<std::string> items) { argv.insert(argv.end(), items); };
  // The sandbox's own directory as bwrap finds it.
  const fs::path own = o.staged_dir.empty() ? o.dirs.root : o.staged_dir;

  add({"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"});
  if (!o.network_host) add({"--unshare-net"});  // bwrap brings up lo in the new namespace
  add({"--uid", std::to_string(o.inner_uid), "--gid", std::to_string(o.inner_gid)});
  add({"--hostname", o.hostname});
  // The agent is the sandbox's pid 1 (no second bwrap as reaper: ~1.7 MB RSS
  // per sandbox). Orphans that escape the session reapers land on it and are
  // collected by the kernel (the agent ignores SIGCHLD); signals sent from
  // inside the sandbox to pid 1 are dropped unless it has a handler, so
  // sandboxed code cannot kill the agent; when it exits the kernel kills the
  // whole pid namespace, as when bwrap's reaper exited (docs/sandbox.md).
  add({"--as-pid-1"});
  // --new-session: no controlling terminal to push input into (CVE-2017-5226).
  add({"--die-with-parent", "--new-session", "--cap-drop", "ALL"});

  for (const auto& dir : kOsDirs) add_os_dir(argv, dir);
  // Needed parts of /etc only (host_etc.cpp); shadow and the rest are absent.
  std::vector<std::string> generated;
  for (const auto& [name, content] : generated_etc_files(o)) {
    generated.push_back(name);
    if (name != "empty") add({"--ro-bind", (own / "etc" / name).string(), "/etc/" + name});
  }
  add_host_etc(argv, generated);
  // The state directory must stay invisible even if it was put under /opt or /usr.
  for (const auto& dir : kOsDirs) {
    if (!o.state_dir.empty() && is_under(o.state_dir, dir)) add({"--size", "4096", "--tmpfs", o.state_dir.string()});
  }

  // Every tmpfs has a size: its pages are RAM, counted in the memory cgroup
  // where there is one and nowhere else (docs/design.md section 8).
  std::string size = std::to_string(o.tmpfs_bytes);
  add({"--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm"});
  // /run is private and empty: the host's sockets (docker, dbus, systemd) stay outside.
  add({"--size", size, "--tmpfs", "/run", "--perms", "0700", "--dir", "/run/agentbox"});
  if (!o.staged_dir.empty()) add({"--ro-bind", (o.staged_dir / kStagedAgent).string(), kAgentPathInside});
  else if (o.agent_fd >= 0) add({"--ro-bind-fd", std::to_string(o.agent_fd), kAgentPathInside});
  else add({"--ro-bind", o.agent_binary.string(), kAgentPathInside});
  add({"--bind", (own / "workspace").string(), "/workspace"});
  add({"--bind", (own / "home").string(), "/home/user"});
  add({"--bind", (own / "tmp").string(), "/tmp"});
  add({"--dir", "/var", "--symlink", "../tmp", "/var/tmp"});
  // bwrap's own tmpfs (the root, /dev) take no size: read-only, they hold
  // nothing the box writes. The mounts on them (/dev/shm, /dev/pts, /workspace...) keep their modes.
  add({"--remount-ro", "/dev", "--remount-ro", "/"});
  add({"--chdir", "/workspace"});
  argv.push_back(kAgentPathInside);
  argv.insert(argv.end(), o.agent_args.begin(), o.agent_args.end());
  return argv;
}

std::vector<std::pair<std::string, std::string>> generated_etc_files(const BwrapOptions& o) {
  std::string uid = std::to_string(o.inner_uid), gid = std::to_string(o.inner_gid);
  std::vector<std::pair<std::string, std::string>> files = {
      {"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                 "user:x:" + uid + ":" + gid + ":sandbox user:/home/user:/bin/bash\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
      {"group", "root:x:0:\nuser:x:" + gid + ":\nnogroup:x:65534:\n"},
      {"hostname", o.hostname + "\n"},
      {"hosts", "127.0.0.1 localhost " + o.hostname + "\n::1 localhost ip6-localhost ip6-loopback\n"},
      {"empty", ""},
  };
  if (o.ca_trust) {
    files.emplace_back(fs::path(kCaBundleInside).filename().string(), o.ca_trust->bundle);
    files.emplace_back(fs::path(kCaInside).filename().string(), o.ca_trust->certificate);
  }
  return files;
}

std::vector<std::string> sandbox_environment(const BwrapOptions& o) {
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "HOME=/home/user", "USER=user", "LOGNAME=user", "SHELL=/bin/bash",
      "LANG=C.UTF-8", "TERM=dumb", "HOSTNAME=" + o.hostname, "TMPDIR=/tmp",
  };
  if (o.proxy_port != 0) {
    // Both spellings: curl reads only the lower-case http_proxy, Go and
    // Python read either. NODE_USE_ENV_PROXY makes Node >= 24's fetch use
    // them (older Node needs undici's EnvHttpProxyAgent: docs/network.md).
    std::string url = "http://127.0.0.1:" + std::to_string(o.proxy_port);
    for (const char* name : {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"})
      env.push_back(std::string(name) + "=" + url);
    for (const char* name : {"no_proxy", "NO_PROXY"}) env.push_back(std::string(name) + "=localhost,127.0.0.1,::1");
    env.push_back("NODE_USE_ENV_PROXY=1");
    for (const auto& variable : o.secret_variables) env.push_back(variable + "=agentbox-secret:" + variable);
    if (o.ca_trust) {
      // OpenSSL (and Go, Python's ssl, curl), requests, curl, pip and git by
      // their own variables; Node adds NODE_EXTRA_CA_CERTS to its built-in roots.
      for (const char* name : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO"})
        env.push_back(std::string(name) + "=" + kCaBundleInside);
      env.push_back(std::string("NODE_EXTRA_CA_CERTS=") + kCaInside);
    }
  }
  return env;
}

std::string printable_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !arg.empty() && arg.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

}  // namespace agentbox::sandbox
