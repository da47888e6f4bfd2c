// `agentbox serve` wired together: options -> sandbox manager -> tools -> MCP
// server on stdio, and the orderly stop at the end of input or on a signal.
#include "app/serve.h"

#include "app/options.h"
#include "server/conversation.h"
#include "server/dispatcher.h"
#include "server/logging.h"
#include "server/mcp_server.h"
#include "server/transport.h"
#include "contract/errors.h"
#include "network/ca.h"
#include "network/policy.h"
#include "network/proxy.h"
#include "sandbox/manager.h"
#include "sandbox/manager_sandboxes.h"
#include "sandbox/uid_range.h"
#include "tools/register.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <future>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace agentbox::app {

// Hosts kill a server that has not exited ~2 s after closing its stdin; if a
// clean shutdown stalls, leave anyway before that.
constexpr auto kShutdownDeadline = std::chrono::milliseconds(1500);

int serve(const std::vector<std::string>& args) {
  auto options = parse_serve_options(args);
  if (!options) return 0;
  server::setup_logging(options->log_level);
  // A policy that does not parse stops the server here, with its sentence.
  std::shared_ptr<const network::PolicyFile> policy;
  if (options->network == "proxy") {
    try {
      policy = std::make_shared<const network::PolicyFile>(network::PolicyFile::load(options->network_policy));
    } catch (const network::PolicyError& e) {
      throw std::invalid_argument(e.what());
    }
  }

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
  if (policy) {
    sandbox_options.network_policy = policy;
    // The CA's key stays here, outside every box's directories (docs/network.md).
    std::shared_ptr<network::CertificateAuthority> ca;
    try {
      ca = network::CertificateAuthority::open(std::filesystem::path(options->state_dir) / "network-ca");
    } catch (const network::CaError& e) {
      throw std::invalid_argument(e.what());
    }
    sandbox_options.proxy = std::make_shared<network::Proxy>(ca);  // its threads start after the mask above
  }
  sandbox_options.idle_timeout = options->idle_timeout;
  sandbox_options.background_keepalive = options->background_keepalive;
  sandbox_options.keep_snapshots = options->keep_snapshots;
  sandbox_options.snapshot_chain = std::max<std::size_t>(1, options->snapshot_chain);
  sandbox_options.checkpoint_interval = options->checkpoint_interval;
  sandbox_options.warm_cache = options->warm_cache;
  sandbox_options.snapshot_timeout = options->snapshot_timeout;
  sandbox_options.snapshot_store = options->snapshot_store;
  sandbox_options.agent_args.insert(sandbox_options.agent_args.end(),
                                    {"--shell-idle-ms", std::to_string(options->shell_idle.count())});
  if (options->cpus) sandbox_options.limits.cpus = *options->cpus;
  if (!options->uid_range.empty()) sandbox_options.uid_range = sandbox::parse_uid_range(options->uid_range);
  sandbox_options.disk = {options->workspace_limit, options->workspace_inodes, options->disk_pool};
  if (options->tmpfs_bytes) sandbox_options.limits.tmpfs_bytes = *options->tmpfs_bytes;
  sandbox_options.spare = options->spare == "none"   ? sandbox::ManagerOptions::Spare::None
                          : options->spare == "warm" ? sandbox::ManagerOptions::Spare::Warm
                                                     : sandbox::ManagerOptions::Spare::Prepared;
  // The manager opens the catalog and repairs what a crash left before it
  // serves: done in the background so initialize is answered at once; the
  // first sandbox call waits for it (and reports why if it failed).
  std::shared_future<std::shared_ptr<sandbox::ManagerSandboxes>> sandboxes =
      std::async(std::launch::async, [sandbox_options, expose_address = options->expose_address] {
        return std::make_shared<sandbox::ManagerSandboxes>(std::make_shared<sandbox::Manager>(sandbox_options),
                                                           expose_address);
      }).share();

  tools::Registry registry;
  tools::Services services;
  services.test_tools = options->test_tools;
  services.sandboxes = [sandboxes]() -> sandbox::Sandboxes* {
    try {
      return sandboxes.get().get();
    } catch (const SandboxError&) {
      throw;
    } catch (const std::exception& e) {
      throw SandboxError(codes::kSandboxStartFailed,
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
                         .server_version = AGENTBOX_VERSION,
                         .services = services});

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
  mcp.stop();
  try {
    sandboxes.get()->manager().shutdown();
  } catch (const std::exception& e) {
    spdlog::warn("sandboxes were unavailable: {}", e.what());
  }
  spdlog::default_logger()->flush();
  return 0;
}

}  // namespace agentbox::app
