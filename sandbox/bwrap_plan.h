// The bubblewrap command line of a sandbox, built as data: a list of
// arguments that can be printed, logged and unit-tested before anything runs
// (bubblewrap itself treats its mount setup the same way). The plan decides
// what a sandbox sees; the code that runs it lives in launch.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

// Host directories backing one sandbox, all under <state>/sandboxes/<id>/.
struct SandboxDirs {
  std::filesystem::path root;
  std::filesystem::path workspace() const { return root / "workspace"; }
  std::filesystem::path home() const { return root / "home"; }
  std::filesystem::path tmp() const { return root / "tmp"; }
  std::filesystem::path etc() const { return root / "etc"; }  // generated passwd, group, hostname
  // A root server's: the host uid/gid of this sandbox alone, which owns
  // workspace, home and tmp and runs bwrap (docs/design.md section 8, "One
  // host uid per sandbox"). Inside it is still inner_uid.
  std::optional<std::pair<unsigned, unsigned>> owner;
};

// What a box trusts for the proxy's interception of hosts with a secret
// (docs/network.md, "HTTPS to a host with a secret"): the agentbox CA's
// certificate alone, and the host's system bundle with it appended. Both are
// public; the CA's key is never among a box's files.
struct CaTrust {
  std::string certificate;
  std::string bundle;
};

// Where a box finds them: generated /etc files, bound read-only like the
// others (the box's own etc directory, so a staged plan reaches them too).
inline constexpr const char* kCaBundleInside = "/etc/agentbox-ca-bundle.pem";
inline constexpr const char* kCaInside = "/etc/agentbox-ca.pem";

struct BwrapOptions {
  std::string bwrap = "/usr/bin/bwrap";
  SandboxDirs dirs;
  std::filesystem::path state_dir;   // hidden if it lies under a bound host directory
  std::string hostname = "agentbox";
  bool network_host = false;         // false: new network namespace with loopback only
  // `--network proxy`: every command gets the proxy variables (HTTP_PROXY
  // and the rest, pointing at 127.0.0.1:proxy_port inside), and each of
  // these variables holds its secret's placeholder ("agentbox-secret:NAME").
  std::uint16_t proxy_port = 0;  // 0: no proxy
  std::vector<std::string> secret_variables;
  // With a proxy that intercepts: the files above, and every command's
  // SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, PIP_CERT and
  // GIT_SSL_CAINFO naming the bundle, NODE_EXTRA_CA_CERTS the CA alone.
  std::shared_ptr<const CaTrust> ca_trust;
  unsigned inner_uid = 1000;         // the uid sandboxed code sees
  unsigned inner_gid = 1000;
  std::filesystem::path agent_binary;  // host path of the agent executable
  // When >= 0, the agent is bound from this fd of bwrap's (--ro-bind-fd)
  // instead of by path: the sandbox user need not be able to reach the path,
  // so the binary is never copied (see LaunchSpec::agent_fd).
  int agent_fd = -1;
  std::vector<std::string> agent_args;  // arguments after the binary ("agent", limits...)
  // Size of each tmpfs the box gets (/dev/shm, /run); the root and /dev,
  // bwrap's own tmpfs, are made read-only instead (docs/design.md section 8).
  std::uint64_t tmpfs_bytes = 64ull << 20;
  // When set, the sandbox's own directories (kStagedDirs) and the agent are
  // bound from here instead of from dirs.root and agent_binary: a root
  // server's launcher mounts them here in a private mount namespace, so
  // bwrap, running as the sandbox user, never walks the state directory's
  // parents (staging.h; docs/sandbox.md "State directory anywhere").
  std::filesystem::path staged_dir;
};

// The entries of dirs.root a staged plan finds under staged_dir, and the
// name of the agent binary there.
inline constexpr const char* kStagedDirs[] = {"workspace", "home", "tmp", "etc"};
inline constexpr const char* kStagedAgent = "agent";

// Where the agent binary appears inside the sandbox.
inline constexpr const char* kAgentPathInside = "/run/agentbox-bin/agentbox";
// The fd number bwrap finds the agent binary on when it is passed by fd.
inline constexpr int kAgentFdInBwrap = 3;

// Host /etc files never shown inside: the plan binds a list of what programs
// need instead of host /etc (host_etc.h), and these are not on it.
const std::vector<std::string>& masked_etc_files();

// A copy of the agent executable for bwrap to bind, so that a box's
// /proc/self/mountinfo shows the copy's neutral name ("/agentbox/agent-<build>"
// on a tmpfs) instead of the install path. One per user and build, shared by
// the servers running it (each holds a shared flock; a server removes the
// copies of other builds none holds); made once, not per sandbox start. Where
// no copy can be made, path() is the source and a warning says so.
class AgentCopy {
 public:
  AgentCopy(const std::filesystem::path& source, const std::filesystem::path& state_dir);
  ~AgentCopy();
  AgentCopy(const AgentCopy&) = delete;
  AgentCopy& operator=(const AgentCopy&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int held_ = -1;
};

// The full argv, starting with the bwrap path.
std::vector<std::string> bwrap_argv(const BwrapOptions& options);

// The files the plan expects in dirs.etc(): passwd/group naming the sandbox
// user, and hostname. Returns (file name, content) pairs.
std::vector<std::pair<std::string, std::string>> generated_etc_files(const BwrapOptions& options);

// The environment the agent starts with (commands inherit it).
std::vector<std::string> sandbox_environment(const BwrapOptions& options);

// Shell-quoted, for logs and `doctor`.
std::string printable_command(const std::vector<std::string>& argv);

}  // namespace agentbox::sandbox
