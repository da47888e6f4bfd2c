#include "bench/bare_plan.h"

#include "sandbox/bwrap_plan.h"
#include "sandbox/host_dirs.h"

#include <unistd.h>

namespace agentbox::bench {

using namespace agentbox::sandbox;

std::vector<std::string> bare_plan_argv(const std::filesystem::path& dir) {
  BwrapOptions plan;
  plan.dirs.root = dir;
  if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path());
  DirsSetup setup;  // by descriptor, following no symlink (host_dirs.h)
  setup.root_mode = 0755;  // bwrap, run as the sandbox user, traverses it
  if (geteuid() == 0) setup.owner = std::make_pair(65534u, 65534u);
  setup.etc_files = generated_etc_files(plan);
  prepare_sandbox_dirs(plan.dirs, setup);
  plan.agent_binary = "/bin/true";  // bound where the agent would be, and run there
  return bwrap_argv(plan);
}

}  // namespace agentbox::bench
