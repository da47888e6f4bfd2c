// sandbox/launch.h: a step that fails in the child comes back to the parent
// with its errno over the close-on-exec pipe, not as a generic failure found
// later by the child's exit status; a program that runs is reported as
// running, its stdio attached.
#include "sandbox/agent_client.h"
#include "sandbox/launch.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <unistd.h>

using namespace agentbox;
using namespace agentbox::sandbox;

TEST_CASE("launch of a missing program returns the child's ENOENT through the pipe", "[launch]") {
  LaunchSpec spec;
  spec.argv = {"/nonexistent/agentbox-no-such-program"};
  try {
    launch(spec);
    FAIL("launch of a missing program succeeded");
  } catch (const LaunchError& e) {
    CHECK(e.err() == ENOENT);
    CHECK(e.code() == codes::kSandboxStartFailed);
    CHECK(e.step() == "exec /nonexistent/agentbox-no-such-program");
    CHECK(std::string(e.what()) ==
          "cannot start the sandbox: exec /nonexistent/agentbox-no-such-program: No such file or directory");
  }
}

TEST_CASE("launch reports a cgroup the child cannot join with its errno", "[launch]") {
  LaunchSpec spec;
  spec.argv = {"/bin/true"};
  spec.cgroup_procs = {"/nonexistent/agentbox-cgroup/cgroup.procs"};
  try {
    launch(spec);
    FAIL("launch joined a cgroup that does not exist");
  } catch (const LaunchError& e) {
    CHECK(e.err() == ENOENT);
    CHECK(e.step() == "join the sandbox cgroup");
  }
}

TEST_CASE("a client attached to a launch that fails throws the launch's error", "[launch]") {
  LaunchSpec spec;
  spec.argv = {"/nonexistent/agentbox-no-such-program"};
  try {
    AgentClient::attach([&spec] { return launch(spec); }, "launch-test");
    FAIL("attach succeeded");
  } catch (const LaunchError& e) {
    CHECK(e.err() == ENOENT);
  }
}

TEST_CASE("a launched program runs with its stdio attached", "[launch]") {
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", "read line; echo \"got $line\""};
  LaunchedProcess p = launch(spec);
  REQUIRE(p.pid > 0);
  REQUIRE(write(p.stdin_fd, "hi\n", 3) == 3);
  close(p.stdin_fd);
  char buf[64] = {};
  ssize_t n = read(p.stdout_fd, buf, sizeof buf - 1);
  CHECK(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0) == "got hi\n");
  CHECK(describe_wait_status(wait_launched(p.pid)) == "exit status 0");
  close(p.stdout_fd);
  close(p.stderr_fd);
}
