// agentbox: an MCP server that gives AI agents sandboxed Linux machines.
// Subcommands: serve (default), doctor, replay, agent (inside a sandbox), version.
#include "server/conversation.h"
#include "server/dispatcher.h"
#include "server/logging.h"
#include "server/mcp_server.h"
#include "server/options.h"
#include "server/replay.h"
#include "server/transport.h"
#include "sandbox/agent.h"
#include "sandbox/bare_plan.h"
#include "sandbox/doctor.h"
#include "sandbox/errors.h"
#include "sandbox/manager.h"
#include "sandbox/uid_range.h"
#include "persistence/cli.h"
#include "tools/register.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <future>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#ifndef AGENTBOX_VERSION
#define AGENTBOX_VERSION "0.0.0"
#endif

namespace {

using namespace agentbox;

constexpr const char* kUsage =
    "usage: agentbox [serve] [options]     MCP server on stdin/stdout (agentbox serve --help)\n"
    "       agentbox doctor [--state-dir DIR]     check what this host allows and what to change\n"
    "       agentbox replay FILE [-- SERVE_ARGS...]   replay a transcript against a fresh server\n"
    "       agentbox snapshot list|show|restore|prune ...   snapshots in the state directory\n"
    "       agentbox sandbox list|destroy ...   sandboxes in the state directory\n"
    "       agentbox version\n";

// Hosts kill a server that has not exited ~2 s after closing its stdin; if a
// clean shutdown stalls, leave anyway before that.
constexpr auto kShutdownDeadline = std::chrono::milliseconds(1500);

int serve(const std::vector<std::string>& args) {
  auto options = server::parse_serve_options(args);
  if (!options) return 0;
  server::setup_logging(options->log_level);

  // SIGTERM/SIGINT are taken by a thread of their own (sigwait) and turned into
  // an orderly stop; SIGUSR1 wakes that thread at exit. All three are blocked
  // here, before any thread exists, so none can hit a thread with the default
  // action (SIGUSR1 would kill the process). Children reset their mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout shows up as EPIPE on write

  std::unique_ptr<server::Recorder> recorder;
  if (!options->record_file.empty()) recorder = std::make_unique<server::Recorder>(options->record_file);

  server::StdioTransport transport(STDIN_FILENO, STDOUT_FILENO, options->max_line_bytes, recorder.get(),
                                  std::chrono::microseconds(options->spin_us));
  sandbox::ManagerOptions sandbox_options;
  sandbox_options.state_dir = options->state_dir;
  sandbox_options.network_host = options->network == "host";
  sandbox_options.idle_timeout = options->idle_timeout;
  sandbox_options.background_keepalive = options->background_keepalive;
  sandbox_options.keep_snapshots = options->keep_snapshots;
  sandbox_options.snapshot_timeout = options->snapshot_timeout;
  sandbox_options.agent_args.insert(sandbox_options.agent_args.end(),
                                    {"--shell-idle-ms", std::to_string(options->shell_idle.count())});
  if (options->cpus) sandbox_options.limits.cpus = *options->cpus;
  if (!options->uid_range.empty()) sandbox_options.uid_range = sandbox::parse_uid_range(options->uid_range);
  sandbox_options.disk = {options->workspace_limit, options->workspace_inodes};
  if (options->tmpfs_bytes) sandbox_options.limits.tmpfs_bytes = *options->tmpfs_bytes;
  sandbox_options.spare = options->spare == "none"   ? sandbox::ManagerOptions::Spare::None
                          : options->spare == "warm" ? sandbox::ManagerOptions::Spare::Warm
                                                     : sandbox::ManagerOptions::Spare::Prepared;
  // The manager opens the catalog and repairs what a crash left before it
  // serves: done in the background so initialize is answered at once; the
  // first sandbox call waits for it (and reports why if it failed).
  std::shared_future<std::shared_ptr<sandbox::Manager>> sandboxes =
      std::async(std::launch::async, [sandbox_options] { return std::make_shared<sandbox::Manager>(sandbox_options); })
          .share();

  tools::Registry registry;
  tools::Services services;
  services.test_tools = options->test_tools;
  services.sandboxes = [sandboxes]() -> sandbox::Manager* {
    try {
      return sandboxes.get().get();
    } catch (const sandbox::SandboxError&) {
      throw;
    } catch (const std::exception& e) {
      throw sandbox::SandboxError(sandbox::codes::kSandboxStartFailed,
                                  std::string("sandboxes are unavailable: ") + e.what());
    }
  };
  services.sandboxes_ready = [sandboxes] {
    return sandboxes.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  tools::register_all(registry, services);

  server::Dispatcher dispatcher(transport, {.workers = options->workers});
  server::McpServer mcp(dispatcher, registry,
                        {.default_conversation = server::default_conversation(options->conversation),
                         .server_version = AGENTBOX_VERSION});

  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (!done.load()) {
      spdlog::info("received {}, shutting down", strsignal(signal));
      transport.stop();
    }
  });

  spdlog::info("agentbox {} serving MCP on stdio (state dir {})", AGENTBOX_VERSION, options->state_dir.string());
  transport.run(dispatcher);
  spdlog::info("input closed, shutting down");
  done.store(true);
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();

  std::thread watchdog([] {
    std::this_thread::sleep_for(kShutdownDeadline);
    spdlog::error("shutdown took longer than {} ms; exiting anyway", kShutdownDeadline.count());
    spdlog::default_logger()->flush();
    _exit(0);
  });
  watchdog.detach();
  // Cancelling the calls in flight kills their commands; then every sandbox
  // stops, its directories left for the next start.
  dispatcher.shutdown();
  try {
    sandboxes.get()->shutdown();
  } catch (const std::exception& e) {
    spdlog::warn("sandboxes were unavailable: {}", e.what());
  }
  spdlog::default_logger()->flush();
  return 0;
}

// The arguments with --state-dir added (the default) when they name none.
std::vector<std::string> with_state_dir(std::vector<std::string> args) {
  for (const auto& a : args) {
    if (a.rfind("--state-dir", 0) == 0) return args;
  }
  args.push_back("--state-dir");
  args.push_back(server::default_state_dir().string());
  return args;
}

int doctor(std::vector<std::string> args) {
  bool has_state_dir = false;
  for (const auto& a : args) has_state_dir |= a.rfind("--state-dir", 0) == 0;
  if (!has_state_dir) {
    args.push_back("--state-dir");
    args.push_back(server::default_state_dir().string());
  }
  std::vector<char*> argv = {const_cast<char*>("doctor")};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return sandbox::doctor_main(static_cast<int>(argv.size() - 1), argv.data());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command = "serve";
  bool is_flag = !args.empty() && args[0].rfind("-", 0) == 0 && args[0] != "--version" && args[0] != "--help" &&
                 args[0] != "-h";
  if (!args.empty() && !is_flag) {
    command = args[0];
    args.erase(args.begin());
  }
  try {
    if (command == "serve") return serve(args);
    if (command == "replay") return server::replay_main(argv[0], args);
    if (command == "agent") return sandbox::agent_main(argc - 1, argv + 1);
    if (command == "doctor") return doctor(args);
    if (command == "snapshot") return persistence::snapshot_main(with_state_dir(args));
    if (command == "sandbox") return persistence::sandbox_cli_main(with_state_dir(args));
    if (command == "bench-plan" && args.size() == 1) {
      // For bench/exec_bench.mjs: the baseline bwrap argv, as JSON.
      std::cout << nlohmann::json(sandbox::bare_plan_argv(args[0])).dump() << "\n";
      return 0;
    }
    if (command == "version" || command == "--version") {
      std::cout << "agentbox " << AGENTBOX_VERSION << "\n";
      return 0;
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "agentbox: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "agentbox " << command << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "agentbox " << command << ": " << e.what() << "\n";
    return 1;
  }
}
