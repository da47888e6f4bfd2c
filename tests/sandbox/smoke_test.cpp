#include "fixture.h"
#include <iostream>
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
TEST_CASE("smoke") {
  SandboxFixture f;
  auto r = f.exec("echo hello; id; pwd; echo err >&2");
  std::cout << r.dump(2) << std::endl;
  r = f.exec("cd /tmp; export FOO=bar; f() { echo fn; }");
  r = f.exec("pwd; echo $FOO; f");
  std::cout << r.dump(2) << std::endl;
}
