#include "fixture.h"

#include <cstdlib>
#include <unistd.h>

namespace agentbox::sandbox::test {

namespace fs = std::filesystem;

SandboxFixture::SandboxFixture(ManagerOptions options) {
  char tmpl[] = "/tmp/agentbox-sandbox-test-XXXXXX";
  state_dir = mkdtemp(tmpl);
  options.state_dir = state_dir;
  // run_unprivileged.sh may run a copy of the binaries from a directory the
  // test user can reach, and says where the agent went.
  // A test that names an agent of its own keeps it.
  const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
  if (options.agent_binary.empty()) options.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
  options.agent_args = {};
  manager = std::make_unique<Manager>(options);
}

SandboxFixture::~SandboxFixture() {
  manager.reset();
  std::error_code ec;
  fs::remove_all(state_dir, ec);
}

json SandboxFixture::call(const std::string& method, json params, const std::string& conversation) {
  Lease lease = manager->acquire(conversation);
  return lease.agent().call(method, std::move(params), std::chrono::minutes(5));
}

json SandboxFixture::exec(const std::string& command, json extra, const std::string& conversation) {
  extra["command"] = command;
  if (!extra.contains("timeout_ms")) extra["timeout_ms"] = 60'000;
  return call("exec", extra, conversation);
}

bool sandboxes_supported(std::string& why) {
  if (access("/usr/bin/bwrap", X_OK) != 0) {
    why = "bwrap is not installed at /usr/bin/bwrap";
    return false;
  }
  return true;
}

}  // namespace agentbox::sandbox::test
