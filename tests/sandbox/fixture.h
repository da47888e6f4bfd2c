// Shared set-up of the sandbox tests: a Manager over a fresh state directory
// that starts real bwrap sandboxes around the test agent executable, and
// shorthands for calling the agent.
#pragma once

#include "sandbox/manager.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

namespace agentbox::sandbox::test {

struct SandboxFixture {
  explicit SandboxFixture(ManagerOptions options = {});
  ~SandboxFixture();

  // Runs a command in the conversation's sandbox through the agent's exec.
  json exec(const std::string& command, json extra = json::object(), const std::string& conversation = "test");
  json call(const std::string& method, json params, const std::string& conversation = "test");

  std::filesystem::path state_dir;
  std::unique_ptr<Manager> manager;
};

// Skips (loudly, via WARN) when this host cannot run sandboxes at all; tests
// then fail on REQUIRE instead of passing silently.
bool sandboxes_supported(std::string& why);

}  // namespace agentbox::sandbox::test
