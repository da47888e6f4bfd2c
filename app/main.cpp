// agentbox: an MCP server that gives AI agents sandboxed Linux machines.
// The composition root: picks the command a person (or an agent host) runs and
// hands it its arguments. Subcommands: serve (default), doctor, replay,
// snapshot, sandbox, agent (inside a sandbox), version. Nothing includes app/:
// it is the top of the dependency order (docs/design.md).
#include "app/doctor.h"
#include "app/options.h"
#include "app/replay.h"
#include "app/serve.h"
#include "app/state_commands.h"
#include "agent/agent.h"

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace agentbox;

constexpr const char* kUsage =
    "usage: agentbox [serve] [options]     MCP server on stdin/stdout (agentbox serve --help)\n"
    "       agentbox doctor [--state-dir DIR]     check what this host allows and what to change\n"
    "       agentbox replay FILE [-- SERVE_ARGS...]   replay a transcript against a fresh server\n"
    "       agentbox snapshot list|show|restore|prune ...   snapshots in the state directory\n"
    "       agentbox sandbox list|destroy ...   sandboxes in the state directory\n"
    "       agentbox version\n";

// The arguments with --state-dir added (the default) when they name none.
std::vector<std::string> with_state_dir(std::vector<std::string> args) {
  for (const auto& a : args) {
    if (a.rfind("--state-dir", 0) == 0) return args;
  }
  args.push_back("--state-dir");
  args.push_back(app::default_state_dir().string());
  return args;
}

int doctor(const std::vector<std::string>& args) {
  std::vector<std::string> full = with_state_dir(args);
  std::vector<char*> argv = {const_cast<char*>("doctor")};
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  return app::doctor_main(static_cast<int>(argv.size() - 1), argv.data());
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
    if (command == "serve") return app::serve(args);
    if (command == "replay") return app::replay_main(argv[0], args);
    if (command == "agent") return agent::agent_main(argc - 1, argv + 1);
    if (command == "doctor") return doctor(args);
    if (command == "snapshot") return app::snapshot_main(with_state_dir(args));
    if (command == "sandbox") return app::sandbox_cli_main(with_state_dir(args));
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
