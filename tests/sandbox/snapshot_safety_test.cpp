// Snapshots of a real box that nothing in it can turn into lost work or a
// hung server (issue 12, points 4 and 5), run as root and as agentbox-test:
// a workspace restore would refuse is kept live at idle and the next call
// says why; a slow snapshot is stopped at --snapshot-timeout and the
// workspace kept; the box cannot take a file lease; entries the box made
// unreadable (chmod 000) are archived and restored with their modes.
#include "fixture.h"

#include <sys/stat.h>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

// 18 nested directories of 243-character names and a file at the bottom:
// a 4,402-byte path, made and read from inside the box.
const std::string kMakeDeep =
    "cd /workspace && for i in $(seq 0 17); do d=$(printf '%0243d' $i); mkdir $d && cd $d || exit 1; done; "
    "echo deep-data > f";
const std::string kReadDeep = "cd /workspace && for i in $(seq 0 17); do cd $(printf '%0243d' $i) || exit 1; done; cat f";

std::string error_code_of(const std::function<void()>& f, std::string& message) {
  try {
    f();
  } catch (const SandboxError& e) {
    message = e.what();
    return e.code();
  }
  return "";
}

}  // namespace

TEST_CASE("a workspace restore would refuse is kept live at idle teardown, and the next call says why") {
  SandboxFixture f;
  REQUIRE(f.exec(kMakeDeep, {}, "deep")["exit_code"] == 0);
  REQUIRE(f.exec("echo kept > /workspace/top", {}, "deep")["exit_code"] == 0);
  std::string message;
  CHECK(error_code_of([&] { f.manager->snapshot("deep", ""); }, message) == "SNAPSHOT_FAILED");
  INFO(message);
  CHECK(message.find("longer than 4096 bytes") != std::string::npos);
  CHECK(message.find("workspace/0000") != std::string::npos);

  CHECK_FALSE(f.manager->teardown("deep"));  // the snapshot failed: nothing was torn down
  auto sandbox = f.manager->find("deep");
  REQUIRE(sandbox);
  CHECK(fs::exists(sandbox->dirs().workspace() / "top"));
  {
    Lease lease = f.manager->acquire("deep");
    INFO(lease.notice());
    CHECK(lease.notice().find("was kept") != std::string::npos);
    CHECK(lease.notice().find("longer than 4096 bytes") != std::string::npos);
  }
  json r = f.exec(kReadDeep + "; cat /workspace/top", {}, "deep");
  CHECK(r["stdout"] == "deep-data\nkept\n");
  // Once the path is shortened, idle teardown and restore work again.
  REQUIRE(f.exec("cd /workspace && for i in 0 1 2; do mv $(printf '%0243d' $i) d$i && cd d$i || exit 1; done", {},
                 "deep")["exit_code"] == 0);
  CHECK(f.manager->teardown("deep"));
  CHECK(f.exec("cat /workspace/top", {}, "deep")["stdout"] == "kept\n");
}

TEST_CASE("a snapshot slower than --snapshot-timeout is stopped and the workspace kept") {
  ManagerOptions o;
  o.snapshot_timeout = std::chrono::milliseconds(300);
  SandboxFixture f(o);
  REQUIRE(f.exec("for i in $(seq 1 40); do echo $i > /workspace/f$i; done", {}, "slow")["exit_code"] == 0);
  setenv("AGENTBOX_TEST_ARCHIVE_DELAY_US", "50000", 1);  // 40 files × 50 ms: 2 s
  auto start = std::chrono::steady_clock::now();
  bool torn = f.manager->teardown("slow");
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::string message;
  std::string code = error_code_of([&] { f.manager->snapshot("slow", ""); }, message);
  unsetenv("AGENTBOX_TEST_ARCHIVE_DELAY_US");
  CHECK_FALSE(torn);
  CHECK(ms < 2000);
  CHECK(code == "SNAPSHOT_FAILED");
  CHECK(message.find("did not finish within") != std::string::npos);
  CHECK(f.exec("cat /workspace/f40", {}, "slow")["stdout"] == "40\n");
  CHECK(f.manager->snapshots("slow").empty());
}

TEST_CASE("code in the box cannot take a file lease") {
  SandboxFixture f;
  json r = f.exec("python3 -c 'import fcntl, os\n"
                  "fd = os.open(\"/workspace/l\", os.O_RDONLY | os.O_CREAT)\n"
                  "try:\n"
                  "    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK); print(\"leased\")\n"
                  "except OSError as e:\n"
                  "    print(e.errno == 1 and \"EPERM\" or e)'");
  INFO(r.dump());
  CHECK(r["stdout"] == "EPERM\n");
}

TEST_CASE("entries the box made unreadable are snapshotted and restored with their modes") {
  SandboxFixture f;
  REQUIRE(f.exec("cd /workspace && mkdir -p d/sub && echo inner > d/sub/f && echo x > d/f && echo y > g && "
                 "chmod 000 d/sub/f g && chmod 000 d/sub && chmod 0311 d", {}, "modes")["exit_code"] == 0);
  f.manager->snapshot("modes", "modes");
  REQUIRE(f.exec("cd /workspace && chmod -R u+rwx d && chmod 644 g && rm -rf d g", {}, "modes")["exit_code"] == 0);
  f.manager->restore("modes", "");
  json r = f.exec("cd /workspace && stat -c '%a %n' d d/sub d/f g && chmod 700 d d/sub && chmod 600 d/sub/f g && "
                  "cat d/sub/f d/f g", {}, "modes");
  INFO(r.dump());
  CHECK(r["stdout"] == "311 d\n0 d/sub\n644 d/f\n0 g\ninner\nx\ny\n");
  // An idle teardown of such a workspace works too.
  REQUIRE(f.exec("chmod 000 /workspace/g", {}, "modes")["exit_code"] == 0);
  CHECK(f.manager->teardown("modes"));
  CHECK(f.exec("stat -c '%a' /workspace/g", {}, "modes")["stdout"] == "0\n");
}
