#include "app/options.h"

#include "persistence/s3_store.h"

#include "sandbox/uid_range.h"
#include "sandbox/disk.h"

#include <boost/program_options.hpp>

#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <pwd.h>
#include <stdexcept>
#include <unistd.h>

namespace po = boost::program_options;

namespace agentbox::app {

std::chrono::milliseconds parse_duration(const std::string& text) {
  std::size_t used = 0;
  double value;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a duration: '" + text + "' (try 10m, 30s, 250ms)");
  }
  std::string unit = text.substr(used);
  double ms;
  if (unit.empty() || unit == "s") ms = value * 1000;
  else if (unit == "ms") ms = value;
  else if (unit == "m" || unit == "min") ms = value * 60'000;
  else if (unit == "h") ms = value * 3'600'000;
  else throw std::invalid_argument("unknown unit in duration '" + text + "' (use ms, s, m or h)");
  if (ms < 0) throw std::invalid_argument("negative duration: '" + text + "'");
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

std::filesystem::path default_state_dir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "agentbox";
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    // Codex passes a minimal environment; fall back to the passwd entry.
    if (const passwd* pw = getpwuid(getuid())) home = pw->pw_dir;
  }
  if (!home || !*home) throw std::invalid_argument("cannot find a state directory: set HOME, XDG_STATE_HOME or --state-dir");
  return std::filesystem::path(home) / ".local" / "state" / "agentbox";
}

std::optional<ServeOptions> parse_serve_options(const std::vector<std::string>& args) {
  std::string state_dir, idle_timeout, keepalive, config, network, conversation, spare, shell_idle, snapshot_timeout;
  std::string checkpoint_interval, warm_cache;
  std::string workspace_limit, tmpfs_size, disk_pool = "auto";
  ServeOptions out;
  po::options_description desc("agentbox serve [options]  (MCP server on stdin/stdout)");
  desc.add_options()
      ("help,h", "show this help")
      ("state-dir", po::value(&state_dir), "where sandboxes, snapshots and the catalog live "
                                           "(default $XDG_STATE_HOME/agentbox or ~/.local/state/agentbox)")
      ("idle-timeout", po::value(&idle_timeout), "snapshot and stop a sandbox idle this long (default 10m)")
      ("background-keepalive", po::value(&keepalive),
       "running background processes keep a sandbox from idling this long at most (default 1h)")
      ("shell-idle-timeout", po::value(&shell_idle),
       "a session shell idle this long with no process left running exits; the next command starts a new one "
       "from the saved session state (default 60s; 0 = never)")
      ("keep-snapshots", po::value(&out.keep_snapshots), "unlabelled snapshots kept per sandbox (default 5)")
      ("snapshot-chain", po::value(&out.snapshot_chain),
       "a snapshot holds only what changed since the previous one, up to this many in a row before a complete "
       "one (default 16; 1 = every snapshot complete)")
      ("checkpoint-interval", po::value(&checkpoint_interval),
       "a sandbox used since its last snapshot is snapshotted (processes frozen) once that is this old (default "
       "15m; 0 = never)")
      ("warm-cache", po::value(&warm_cache),
       "stopped workspaces kept ready on disk after an idle teardown, least recently used dropped first, e.g. 20G "
       "(default: 10% of the state filesystem's free space; 0 = none, every restore extracts its archive)")
      ("snapshot-timeout", po::value(&snapshot_timeout),
       "a snapshot or restore still running after this is stopped and fails; the workspace is kept (default 10m)")
      ("snapshot-store", po::value(&out.snapshot_store),
       "s3://bucket/prefix: every snapshot is copied to this S3-compatible store too, and a conversation this "
       "server does not know is restored from it (endpoint and keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
       "AWS_SECRET_ACCESS_KEY, AWS_REGION; docs/scale-out.md)")
      ("network", po::value(&network),
       "none (loopback only, default), host (the host's network), or proxy (out only through the server's proxy, "
       "under --network-policy)")
      ("network-policy", po::value(&out.network_policy),
       "with --network proxy: the JSON file of allowed and denied hosts, pinned names and secrets (docs/network.md)")
      ("expose-address", po::value(&out.expose_address),
       "the host address exposed ports listen on (default 127.0.0.1; e.g. 0.0.0.0 reaches them from other machines)")
      ("conversation", po::value(&conversation), "conversation id when the host names none")
      ("record", po::value(&out.record_file), "write every message in and out to this JSON-lines file")
      ("log-level", po::value(&out.log_level), "trace, debug, info (default), warn, error, critical, off")
      ("config", po::value(&config), "read options from this file (name = value lines)")
      ("max-line-bytes", po::value(&out.max_line_bytes), "longest accepted protocol line (default 16 MiB)")
      ("workers", po::value(&out.workers), "worker threads for requests (default 4)")
      ("spin-us", po::value(&out.spin_us),
       "in a burst of requests (each within this time of the last), poll stdin this many microseconds "
       "before sleeping: saves a thread wake-up per call for CPU time (default 200; 0 = never; off with one CPU)")
      ("test-tools", po::bool_switch(&out.test_tools), "also offer the test fixtures (for the test suite)")
      ("cpus", po::value<double>(), "CPU quota per sandbox in CPUs, e.g. 1.5; 0 = none (default: all CPUs but one, "
                                    "at least 1; needs the cgroup cpu controller)")
      ("workspace-limit", po::value(&workspace_limit), "bytes a sandbox's /workspace, /home/user and /tmp may hold "
                                                       "together, e.g. 64M, 10G (default 10G; 0 = unlimited; needs "
                                                       "root and loop devices, else not enforced)")
      ("workspace-inodes", po::value(&out.workspace_inodes), "files a sandbox may hold (default: one per 16 KiB of "
                                                             "--workspace-limit)")
      ("disk-pool", po::value(&disk_pool), "as root where the state filesystem cannot clone files (ext4): keep "
                                           "sandbox disk images in a btrfs pool file, <state>/disks.pool, so a fork "
                                           "made now is a copy-on-write clone: auto (default) or off")
      ("tmpfs-size", po::value(&tmpfs_size), "size of each tmpfs in a sandbox (/dev/shm, /run), e.g. 64M "
                                             "(default 64M; RAM, counted in the sandbox's memory cgroup if any)")
      ("spare", po::value(&spare), "what is made ready for the next new conversation: none, prepared (default: "
                                   "directories, cgroup and launcher) or warm (a running spare sandbox)")
      ("uid-range", po::value(&out.uid_range),
       "as root, host uids and gids for sandboxes, one each: START:COUNT (default: the /etc/subuid and /etc/subgid "
       "entries of user agentbox, else 2000000000:65536)");

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
    if (!config.empty()) {
      std::ifstream file(config);
      if (!file) throw std::invalid_argument("cannot read config file " + config);
      po::store(po::parse_config_file(file, desc), vm);
      po::notify(vm);
    }
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  if (vm.count("help")) {
    std::cerr << desc << "\n";
    return std::nullopt;
  }
  out.state_dir = state_dir.empty() ? default_state_dir() : std::filesystem::path(state_dir);
  if (!idle_timeout.empty()) out.idle_timeout = parse_duration(idle_timeout);
  if (!snapshot_timeout.empty()) out.snapshot_timeout = parse_duration(snapshot_timeout);
  if (!checkpoint_interval.empty()) out.checkpoint_interval = parse_duration(checkpoint_interval);
  if (!warm_cache.empty()) out.warm_cache = sandbox::parse_size(warm_cache);
  if (!keepalive.empty()) out.background_keepalive = parse_duration(keepalive);
  if (!shell_idle.empty()) out.shell_idle = parse_duration(shell_idle);
  if (!network.empty()) {
    if (network != "none" && network != "host" && network != "proxy")
      throw std::invalid_argument("--network must be none, host or proxy, not '" + network + "'");
    out.network = network;
  }
  if (out.network == "proxy" && out.network_policy.empty())
    throw std::invalid_argument("--network proxy needs --network-policy FILE (the hosts a sandbox may reach)");
  if (out.network != "proxy" && !out.network_policy.empty())
    throw std::invalid_argument("--network-policy applies to --network proxy only");
  {
    unsigned char address[16];
    if (inet_pton(AF_INET, out.expose_address.c_str(), address) != 1 &&
        inet_pton(AF_INET6, out.expose_address.c_str(), address) != 1)
      throw std::invalid_argument("--expose-address must be an IPv4 or IPv6 address, not '" + out.expose_address + "'");
  }
  if (!out.snapshot_store.empty()) {
    persistence::StoreLocation where;
    if (std::string why = persistence::parse_store_url(out.snapshot_store, where); !why.empty())
      throw std::invalid_argument(why);
    for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
      if (const char* v = std::getenv(name); !v || !*v)
        throw std::invalid_argument(std::string("--snapshot-store needs ") + name + " in the environment");
  }
  if (!conversation.empty()) out.conversation = conversation;
  if (out.max_line_bytes < 1024) throw std::invalid_argument("--max-line-bytes must be at least 1024");
  if (out.spin_us > 10'000) throw std::invalid_argument("--spin-us must be at most 10000 (10 ms)");
  if (out.workers < 1 || out.workers > 256) throw std::invalid_argument("--workers must be between 1 and 256");
  if (vm.count("cpus")) {
    double cpus = vm["cpus"].as<double>();
    if (!(cpus >= 0) || cpus > 4096) throw std::invalid_argument("--cpus must be 0 (no quota) or a number of CPUs");
    if (cpus > 0 && cpus < 0.01) throw std::invalid_argument("--cpus must be at least 0.01 (or 0 for no quota)");
    out.cpus = cpus;
  }
  if (!out.uid_range.empty()) sandbox::parse_uid_range(out.uid_range);  // throws std::invalid_argument
  if (!workspace_limit.empty()) out.workspace_limit = sandbox::parse_size(workspace_limit);
  if (out.workspace_limit != 0 && out.workspace_limit < (16ull << 20))
    throw std::invalid_argument("--workspace-limit must be at least 16M (or 0 for unlimited)");
  if (disk_pool != "auto" && disk_pool != "off")
    throw std::invalid_argument("--disk-pool must be auto or off, not '" + disk_pool + "'");
  out.disk_pool = disk_pool == "auto";
  if (!tmpfs_size.empty()) {
    out.tmpfs_bytes = sandbox::parse_size(tmpfs_size);
    if (*out.tmpfs_bytes < 4096) throw std::invalid_argument("--tmpfs-size must be at least 4096 bytes");
  }
  if (!spare.empty()) {
    if (spare != "none" && spare != "prepared" && spare != "warm")
      throw std::invalid_argument("--spare must be none, prepared or warm, not '" + spare + "'");
    out.spare = spare;
  }
  return out;
}

}  // namespace agentbox::app
