// The in-box agent's start: the ordered checklist of what it does to itself
// before it serves a request (as nsjail's contain.cc reads), each step one
// call. Everything the box will run is started by the agent afterwards, so
// every step covers every process in the box. A failed step ends the agent
// with the reason on stderr, which the server reads and reports.
#include "agent/agent.h"

#include "agent/file_paths.h"
#include "agent/seccomp.h"
#include "contract/agent_methods.h"
#include "contract/errors.h"
#include "contract/limits.h"
#include "os/errno_text.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <malloc.h>
#include <pthread.h>
#include <string>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <utility>
#include <vector>

extern char** environ;

namespace agentbox::agent {

namespace {

struct AgentOptions {
  bool seccomp = true;
  AgentConfig config;
  std::vector<std::pair<int, rlim_t>> rlimits;
};

// The options the host writes (contract/limits.h, sandbox/limits.cpp).
AgentOptions parse_options(int argc, char** argv) {
  AgentOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::uint64_t {
      if (i + 1 >= argc) throw SandboxError(codes::kInvalidArguments, arg + " needs a value");
      return std::stoull(argv[++i]);
    };
    if (arg == "agent") continue;  // the subcommand name, when called through main
    namespace opt = contract::agent_options;
    if (arg == opt::kNoSeccomp) o.seccomp = false;
    else if (arg == opt::kNproc) o.rlimits.emplace_back(RLIMIT_NPROC, value());
    else if (arg == opt::kFsize) o.rlimits.emplace_back(RLIMIT_FSIZE, value());
    else if (arg == opt::kNofile) o.rlimits.emplace_back(RLIMIT_NOFILE, value());
    else if (arg == opt::kData) o.rlimits.emplace_back(RLIMIT_DATA, value());
    else if (arg == opt::kOutputChars) o.config.inline_output_chars = value();
    else if (arg == opt::kHeadBytes) o.config.process_head_bytes = value();
    else if (arg == opt::kTailBytes) o.config.process_tail_bytes = value();
    else if (arg == opt::kShellIdleMs) o.config.shell_idle = std::chrono::milliseconds(value());
    else if (arg == opt::kWorkspaceLimit) set_workspace_limit(value());
    else throw SandboxError(codes::kInvalidArguments, "unknown agent option " + arg);
  }
  for (char** e = environ; *e; ++e) o.config.environment.emplace_back(*e);
  return o;
}

// Code in the box has the agent's uid, and while the agent is dumpable it
// could open /proc/1/fd/1 (the agent's pipe to the server), /proc/1/mem, or
// ptrace or pidfd_getfd it, and write replies the server would believe
// (docs/sandbox.md, "The wall between host and box"). Not dumpable, all of
// those need CAP_SYS_PTRACE, which nothing in the box has. Children the
// agent starts are dumpable again once they exec (the kernel resets it).
void make_not_dumpable() {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) throw SandboxError(codes::kInternal, std::strerror(errno));
}

// Memory is paid per sandbox (docs/sandbox.md, "Performance"): one malloc
// arena instead of one per thread (each request runs on a thread of its
// own), and request threads on 256 KiB stacks instead of 8 MiB.
void limit_memory_per_thread() {
  mallopt(M_ARENA_MAX, 1);
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) == 0) {
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  }
}

void set_process_defaults() {
  umask(022);
  std::signal(SIGPIPE, SIG_IGN);  // a dead shell must be an EPIPE, not the agent's death
  std::signal(SIGCHLD, SIG_IGN);  // reapers are collected by the kernel; they report through pipes
}

// No core files (they would land in the workspace), then the host's limits.
void apply_rlimits(const AgentOptions& o) {
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  for (const auto& [resource, value] : o.rlimits) {
    rlimit limit{value, value};
    if (setrlimit(resource, &limit) != 0)
      throw SandboxError(codes::kInternal, os::errno_text("setrlimit", errno));
  }
}

}  // namespace

int agent_main(int argc, char** argv) {
  try {
    // Nothing the box runs gains privileges through exec (setuid, file caps).
    set_no_new_privs();
    // Before the box runs anything: the box must not read or forge the agent's pipes.
    make_not_dumpable();
    // Before the first thread, so every thread gets the small arena and stack.
    limit_memory_per_thread();
    AgentOptions options = parse_options(argc, argv);
    // umask and signals every command inherits.
    set_process_defaults();
    // The host's per-process limits, inherited by every command.
    apply_rlimits(options);
    // Before any thread or command exists, so every one is covered.
    if (options.seccomp) install_seccomp_filter();
    // The agent's private tmpfs (the bwrap plan mounts it) holds session state.
    mkdir(contract::kRuntimeDir, 0700);
    return serve(options.config);
  } catch (const std::exception& e) {
    // Logs go to stderr, which the server reads and prefixes; stdout is protocol only.
    std::fprintf(stderr, "agent cannot start: %s\n", e.what());
    return 1;
  }
}

}  // namespace agentbox::agent
