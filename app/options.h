// Command-line options of `agentbox serve`, parsed with Boost.Program_options
// (also from an INI-style --config file; the command line wins), and the
// default state directory every command uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::app {

struct ServeOptions {
  std::filesystem::path state_dir;
  std::chrono::milliseconds idle_timeout{10 * 60 * 1000};
  std::chrono::milliseconds background_keepalive{60 * 60 * 1000};  // running processes delay idling this long at most
  std::chrono::milliseconds shell_idle{60 * 1000};  // an idle session shell exits after this; 0 = never
  std::size_t keep_snapshots = 5;  // unlabelled snapshots kept per sandbox
  std::size_t snapshot_chain = 16;  // incremental snapshots per chain (1: all complete)
  std::chrono::milliseconds checkpoint_interval{15 * 60 * 1000};  // a busy sandbox's snapshot at most this old; 0 = never
  std::chrono::milliseconds snapshot_timeout{10 * 60 * 1000};  // one snapshot or restore at most
  std::string snapshot_store;  // s3://bucket/prefix: snapshots copied there too (docs/scale-out.md)
  std::optional<std::uint64_t> warm_cache;  // bytes of stopped workspaces kept ready; none: 10% of free space
  std::string network = "none";  // none | host | proxy
  std::string network_policy;    // --network proxy: the policy file
  std::string expose_address = "127.0.0.1";  // where exposed ports listen on the host
  std::optional<std::string> conversation;
  std::string record_file;
  std::string log_level = "info";
  std::size_t max_line_bytes = 16 * 1024 * 1024;
  std::size_t workers = 4;
  std::size_t spin_us = 200;  // stdin is polled this long without sleeping in a burst of requests; 0 = never
  bool test_tools = false;
  std::optional<double> cpus;     // CPU quota per sandbox in CPUs, 0 = none (default: all CPUs but one)
  std::optional<std::uint64_t> tmpfs_bytes;  // size of each tmpfs in a sandbox (default 64 MiB)
  std::string spare = "prepared";  // none | prepared | warm: what is ready for the next new conversation
  std::string uid_range;  // START:COUNT host ids for a root server's sandboxes; empty: sandbox/uid_range.h default
  std::uint64_t workspace_limit = 10ull << 30;  // bytes per sandbox (its own filesystem, sandbox/disk.h); 0 = none
  std::uint64_t workspace_inodes = 0;           // 0: one per 16 KiB of workspace_limit
  bool disk_pool = true;  // --disk-pool auto|off (sandbox/disk_pool.h)
};

// Parses `serve` arguments (argv without the program and subcommand names).
// Throws std::invalid_argument with a message for the user. Returns nullopt
// when --help was asked for (the help text is printed).
std::optional<ServeOptions> parse_serve_options(const std::vector<std::string>& args);

// "10m", "30s", "250ms", "1h", or a bare number of seconds.
std::chrono::milliseconds parse_duration(const std::string& text);

// $XDG_STATE_HOME/agentbox, else ~/.local/state/agentbox.
std::filesystem::path default_state_dir();

}  // namespace agentbox::app
