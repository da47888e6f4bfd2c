// agent/code_contexts.h outside a box: what is refused before an
// interpreter starts (a language the box lacks, an unknown language, a
// context the agent does not run). The interpreters themselves run in real
// boxes in tests/clients/code.test.mjs.
#include "agent/code_contexts.h"

#include <catch2/catch.hpp>

using namespace agentbox;
using namespace agentbox::agent;

namespace {
std::string code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SandboxError& e) {
    return e.code() + ": " + e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a language whose interpreter the box lacks is refused naming the program", "[agent][code]") {
  AgentConfig config;
  config.environment = {"PATH=/nonexistent:/also/missing"};
  CodeTable table(config);
  std::string error = code_of([&] { table.create({{"context", "js"}, {"language", "javascript"}}); });
  CHECK(error.rfind("SPAWN_FAILED: this sandbox has no node", 0) == 0);
  error = code_of([&] { table.create({{"context", "py"}, {"language", "python"}}); });
  CHECK(error.rfind("SPAWN_FAILED: this sandbox has no python3", 0) == 0);
  CHECK(table.list({})["contexts"].empty());
}

TEST_CASE("an unknown language and a context the agent does not run are refused", "[agent][code]") {
  AgentConfig config;
  CodeTable table(config);
  CHECK(code_of([&] { table.create({{"context", "r"}, {"language", "r"}}); }).rfind("INVALID_ARGUMENTS", 0) == 0);
  AgentRequest run(1, {{"context", "python"}, {"code", "1"}}, [](const std::string&, nlohmann::json) {});
  CHECK(code_of([&] { table.run(run); }).rfind("CONTEXT_NOT_FOUND: this sandbox runs no code context 'python'", 0) == 0);
}
