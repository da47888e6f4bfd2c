// The test runner. Server code logs every request through spdlog; that noise
// would bury Catch's report, so logging is off unless AGENTBOX_TEST_LOG names a
// level ("debug", "info", ...).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>

int main(int argc, char** argv) {
  const char* level = std::getenv("AGENTBOX_TEST_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::off);
  return Catch::Session().run(argc, argv);
}
