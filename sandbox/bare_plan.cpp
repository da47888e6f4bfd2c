#include "sandbox/bare_plan.h"

#include "sandbox/bwrap_plan.h"
#include "sandbox/errors.h"

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

std::vector<std::string> bare_plan_argv(const std::filesystem::path& dir) {
  BwrapOptions plan;
  plan.dirs.root = dir;
  for (const auto& d : {plan.dirs.root, plan.dirs.workspace(), plan.dirs.home(), plan.dirs.tmp(), plan.dirs.etc()})
    std::filesystem::create_directories(d);
  for (const auto& [name, content] : generated_etc_files(plan)) std::ofstream(plan.dirs.etc() / name) << content;
  if (geteuid() == 0) {
    for (const auto& d : {plan.dirs.root, plan.dirs.workspace(), plan.dirs.home(), plan.dirs.tmp()})
      if (chown(d.c_str(), 65534, 65534) != 0)
        throw SandboxError(codes::kSandboxStartFailed, errno_message("chown " + d.string(), errno));
  }
  plan.agent_binary = "/bin/true";  // bound where the agent would be, and run there
  return bwrap_argv(plan);
}

}  // namespace agentbox::sandbox
