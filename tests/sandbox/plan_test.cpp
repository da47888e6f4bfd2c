// Unit tests of the pieces that need no sandbox: the bwrap plan as data, the
// bounded output buffer, signal names, cgroup detection and the seccomp filter.
#include "sandbox/agent_spawn.h"
#include "sandbox/bwrap_plan.h"
#include "sandbox/cgroups.h"
#include "sandbox/host_etc.h"
#include "sandbox/output_buffer.h"
#include "sandbox/seccomp.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>

using namespace agentbox::sandbox;

namespace {

BwrapOptions sample() {
  BwrapOptions o;
  o.dirs.root = "/var/lib/agentbox/sandboxes/abc";
  o.state_dir = "/var/lib/agentbox";
  o.agent_binary = "/usr/local/bin/agentbox";
  o.agent_args = {"agent", "--nproc", "512"};
  return o;
}

bool has(const std::vector<std::string>& argv, const std::string& a) {
  return std::find(argv.begin(), argv.end(), a) != argv.end();
}

// Whether argv has the sequence a b c.
bool has_triple(const std::vector<std::string>& argv, const std::string& a, const std::string& b, const std::string& c) {
  for (std::size_t i = 0; i + 2 < argv.size(); ++i)
    if (argv[i] == a && argv[i + 1] == b && argv[i + 2] == c) return true;
  return false;
}

}  // namespace

TEST_CASE("bwrap plan isolates namespaces and drops privileges") {
  auto argv = bwrap_argv(sample());
  for (const char* flag : {"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                           "--die-with-parent", "--new-session"})
    CHECK(has(argv, flag));
  CHECK(has_triple(argv, "--cap-drop", "ALL", "--ro-bind"));
  CHECK(has_triple(argv, "--uid", "1000", "--gid"));
  CHECK(argv.back() == "512");
}

TEST_CASE("bwrap plan keeps the network only with network_host") {
  auto o = sample();
  o.network_host = true;
  CHECK_FALSE(has(bwrap_argv(o), "--unshare-net"));
}

TEST_CASE("bwrap plan binds the sandbox dirs and never host homes, /root or /run") {
  auto argv = bwrap_argv(sample());
  CHECK(has_triple(argv, "--bind", "/var/lib/agentbox/sandboxes/abc/workspace", "/workspace"));
  CHECK(has_triple(argv, "--bind", "/var/lib/agentbox/sandboxes/abc/home", "/home/user"));
  CHECK(has_triple(argv, "--bind", "/var/lib/agentbox/sandboxes/abc/tmp", "/tmp"));
  CHECK(has_triple(argv, "--ro-bind", "/usr", "/usr"));
  CHECK(has_triple(argv, "--proc", "/proc", "--dev"));
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] != "--bind" && argv[i] != "--ro-bind") continue;
    const std::string& source = argv[i + 1];
    CHECK(source.rfind("/home", 0) != 0);
    CHECK(source.rfind("/root", 0) != 0);
    CHECK(source.rfind("/run", 0) != 0);
    CHECK(source != "/");
  }
  CHECK(has_triple(argv, "--tmpfs", "/run", "--perms"));
}

TEST_CASE("bwrap plan binds needed parts of /etc, not shadow, and hides a state dir under a bound directory") {
  auto o = sample();
  o.state_dir = "/opt/agentbox-state";
  auto argv = bwrap_argv(o);
  // Host /etc is not bound whole, and shadow is not bound at all (host_etc.cpp).
  CHECK_FALSE(has_triple(argv, "--ro-bind", "/etc", "/etc"));
  for (const auto& arg : argv) CHECK(arg.find("shadow") == std::string::npos);
  if (std::filesystem::is_regular_file(std::filesystem::symlink_status("/etc/resolv.conf")))
    CHECK(has_triple(argv, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"));
  // What must never be shown is not on the list, whatever the host has.
  for (const auto& file : masked_etc_files()) {
    std::string top = std::filesystem::path(file).lexically_relative("/etc").begin()->string();
    CHECK_FALSE(host_etc_binds(top));
  }
  CHECK(has_triple(argv, "--ro-bind", "/var/lib/agentbox/sandboxes/abc/etc/passwd", "/etc/passwd"));
  CHECK(has_triple(argv, "--ro-bind", "/opt", "/opt"));
  auto tmpfs = std::find(argv.begin(), argv.end(), "/opt/agentbox-state");
  REQUIRE(tmpfs != argv.end());
  CHECK(*(tmpfs - 1) == "--tmpfs");
}

TEST_CASE("a staged bwrap plan binds the sandbox's own dirs and the agent from the staging dir, never by state path") {
  auto o = sample();
  o.agent_fd = kAgentFdInBwrap;
  o.staged_dir = "/run/agentbox-staging";
  auto argv = bwrap_argv(o);
  // bwrap (as the sandbox user) realpath()s every source: none may lie under the state directory.
  for (const auto& arg : argv) CHECK(arg.find("/var/lib/agentbox") == std::string::npos);
  CHECK(has_triple(argv, "--bind", "/run/agentbox-staging/workspace", "/workspace"));
  CHECK(has_triple(argv, "--bind", "/run/agentbox-staging/home", "/home/user"));
  CHECK(has_triple(argv, "--bind", "/run/agentbox-staging/tmp", "/tmp"));
  CHECK(has_triple(argv, "--ro-bind", "/run/agentbox-staging/etc/passwd", "/etc/passwd"));
  CHECK(has_triple(argv, "--ro-bind", "/run/agentbox-staging/agent", kAgentPathInside));
  CHECK_FALSE(has(argv, "--ro-bind-fd"));
  // Every source a staged plan takes from the staging dir is one kStagedDirs (or the agent) provides.
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    const std::string& source = argv[i + 1];
    if ((argv[i] != "--bind" && argv[i] != "--ro-bind") || source.rfind("/run/agentbox-staging/", 0) != 0) continue;
    std::string entry = source.substr(std::string("/run/agentbox-staging/").size());
    entry = entry.substr(0, entry.find('/'));
    bool known = entry == kStagedAgent;
    for (const char* dir : kStagedDirs) known |= entry == dir;
    CHECK(known);
  }
}

TEST_CASE("printable_command quotes what a shell would split") {
  CHECK(printable_command({"bwrap", "--setenv", "A", "x y", "it's"}) == "bwrap --setenv A 'x y' 'it'\\''s'");
}

TEST_CASE("output buffer keeps head and tail of a flood with exact offsets") {
  OutputBuffer buffer(10, 20);
  std::string all;
  for (int i = 0; i < 1000; ++i) {
    std::string piece = std::to_string(i) + ",";
    all += piece;
    buffer.append(piece);
  }
  CHECK(buffer.total() == all.size());
  CHECK(buffer.read(0, 20).data == all.substr(0, 10));  // the budget is shown_cost: 2 a byte
  auto gap = buffer.read(10, 100);
  CHECK(gap.skipped > 0);
  CHECK(gap.data.find("bytes were dropped") != std::string::npos);
  CHECK(gap.next_offset == all.size());
  CHECK(gap.data.substr(gap.data.size() - 20) == all.substr(all.size() - 20));
  auto tail = buffer.read(all.size() - 5, 100);
  CHECK(tail.data == all.substr(all.size() - 5));
  CHECK(tail.next_offset == all.size());
}

TEST_CASE("inline view cuts the middle within its budget and says where the cut starts") {
  OutputBuffer buffer(1000, 1000);
  std::string text(500, 'a');
  text += std::string(500, 'z');
  buffer.append(text);
  auto view = buffer.inline_view(200);  // each byte costs 2: 100 bytes shown
  CHECK(view.truncated);
  CHECK(view.cut_from == 50);
  CHECK(view.text.rfind(std::string(50, 'a') + "\n[... 900 bytes not shown", 0) == 0);
  CHECK(view.text.substr(view.text.size() - 50) == std::string(50, 'z'));
  CHECK_FALSE(buffer.inline_view(2000).truncated);
  CHECK(buffer.inline_view(2000).cut_from == 1000);
}

TEST_CASE("inline view and reads keep under a line count and start lines whole") {
  OutputBuffer buffer(1 << 20, 1 << 20);
  std::string all;
  for (int i = 0; i < 5000; ++i) all += std::to_string(i) + "\n";
  buffer.append(all);
  auto view = buffer.inline_view(100'000, 100);
  CHECK(view.truncated);
  CHECK(std::count(view.text.begin(), view.text.end(), '\n') <= 101);
  CHECK(view.text.rfind("0\n1\n", 0) == 0);
  CHECK(view.text.substr(view.text.size() - 10) == "4998\n4999\n");
  CHECK(view.text.find("\n[... ") == all.find("50\n") - 1);
  auto page = buffer.read(0, 100'000, 10);
  CHECK(page.data == "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  CHECK(page.next_offset == 20);
}

TEST_CASE("a read in the head stops where bytes were dropped, so paging loses nothing") {
  OutputBuffer buffer(100, 100);
  std::string all;
  for (int i = 0; i < 1000; ++i) all += static_cast<char>('a' + i % 26);
  buffer.append(all);
  auto head = buffer.read(60, 1000);
  CHECK(head.data == all.substr(60, 40));
  CHECK(head.next_offset == 100);
  auto gap = buffer.read(head.next_offset, 1000);
  CHECK(gap.data.find("bytes were dropped") != std::string::npos);
  CHECK(gap.next_offset == all.size());
}

TEST_CASE("shown cost counts a byte in the text and escaped in JSON") {
  CHECK(shown_cost("ab") == 4);
  CHECK(shown_cost("\n\"") == 6);
  CHECK(shown_cost(std::string(1, '\x01')) == 7);
  CHECK(shown_cost("\xC3\xA9") == 4);      // é
  CHECK(shown_cost("\xC3") == 6);          // not UTF-8: U+FFFD twice
  CHECK(shown_cost("\xED\xA0\x80") == 18);  // a surrogate is not UTF-8 either
  CHECK(fit_prefix("abc\xC3\xA9", 7, 10) == 3);
  CHECK(fit_prefix("a\nb\nc", 100, 1) == 2);
  CHECK(fit_prefix("abc", 100, 0) == 3);
  CHECK(fit_prefix("ab\nc", 100, 0) == 2);
  CHECK(fit_suffix("abc\xC3\xA9", 5, 10) == 2);
  CHECK(fit_suffix("a\nb\nc\n", 100, 2) == 4);
}

TEST_CASE("cuts never split a UTF-8 sequence") {
  std::string s = "a\xC3\xA9\xC3\xA9";  // a é é
  CHECK(utf8_prefix(s, 2) == "a");
  CHECK(utf8_suffix(s, 3) == "\xC3\xA9");
}

TEST_CASE("signal names round-trip") {
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_number("SIGTERM") == SIGTERM);
  CHECK(signal_number("kill") == SIGKILL);
  CHECK(signal_number("SIGNOPE") == 0);
}

TEST_CASE("split_budget gives stderr at least a quarter when both overflow") {
  auto [out, err] = split_budget(100000, 100000, 30000);
  CHECK(out + err == 30000);
  CHECK(err == 7500);
  auto [o2, e2] = split_budget(10, 20, 30000);
  CHECK(o2 == 10);
  CHECK(e2 == 20);
}

TEST_CASE("seccomp filter loads on this host and refuses the listed calls") {
  std::string why;
  bool usable = seccomp_usable(why);
  if (!usable) FAIL("seccomp unusable here: " << why);
  CHECK(std::find(denied_syscalls().begin(), denied_syscalls().end(), "keyctl") != denied_syscalls().end());
  CHECK(std::find(denied_syscalls().begin(), denied_syscalls().end(), "ptrace") != denied_syscalls().end());
}

TEST_CASE("cgroup detection reports what it found in words") {
  CgroupSupport s = detect_cgroups();
  CHECK_FALSE(s.detail.empty());
  if (!s.writable) WARN("cgroups not writable here (" << s.detail << "): limits fall back to rlimits");
}
