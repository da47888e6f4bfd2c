// What the server does as root on paths a box can write never follows a
// symlink the box planted (docs/design.md section 2, "Root and the box's
// paths"): the workspace walk of sandbox_status, the directories a start
// prepares, and the trees a teardown or destroy deletes. Host-side targets
// live outside the state directory, where the box cannot see them.
#include "fixture.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t kHostSize = 7'777'777;

// A host directory the box cannot see, with one file of a distinctive size.
struct HostTarget {
  fs::path dir;
  fs::path file;
  HostTarget() {
    char tmpl[] = "/tmp/agentbox-host-target-XXXXXX";
    dir = mkdtemp(tmpl);
    file = dir / "secret";
    std::ofstream(file, std::ios::binary) << std::string(kHostSize, 's');
    chmod(file.c_str(), 0600);
  }
  ~HostTarget() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  struct stat file_stat() const {
    struct stat st{};
    REQUIRE(lstat(file.c_str(), &st) == 0);
    return st;
  }
};

void replace_with_symlink(const fs::path& entry, const fs::path& target) {
  fs::remove_all(entry);
  fs::create_symlink(target, entry);
}

}  // namespace

TEST_CASE("workspace_bytes never reports a host file the box flips in with RENAME_EXCHANGE") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  SandboxFixture f;
  HostTarget host;
  REQUIRE(f.exec("head -c 200000 /dev/zero > /workspace/real")["exit_code"] == 0);
  auto sandbox = f.manager->find("test");
  REQUIRE(sandbox);
  CHECK(sandbox->workspace_bytes() >= 200'000);
  CHECK(sandbox->workspace_bytes() < kHostSize);
  // /workspace/f flips between a small file and a symlink to the host file
  // (a dangling link inside the box, which has no such path).
  std::string flipper =
      "printf 0123456789 > /workspace/f && ln -s " + host.file.string() + " /workspace/g && " +
      "echo flipping && exec timeout 60 python3 -c \"import ctypes; l=ctypes.CDLL(None); "
      "[l.renameat2(-100, b'/workspace/f', -100, b'/workspace/g', 2) for _ in iter(int, 1)]\"";
  auto started = f.call("process.start", {{"command", flipper}});
  REQUIRE(started.contains("process_id"));
  auto ready = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!fs::is_symlink(sandbox->dirs().workspace() / "g") && !fs::is_symlink(sandbox->dirs().workspace() / "f") &&
         std::chrono::steady_clock::now() < ready)
    usleep(10'000);
  std::uintmax_t largest = 0;
  int calls = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (; calls < 20'000 && std::chrono::steady_clock::now() < until; ++calls)
    largest = std::max<std::uintmax_t>(largest, sandbox->workspace_bytes());
  INFO(calls << " walks; largest " << largest);
  CHECK(calls > 100);
  CHECK(largest < kHostSize);
  CHECK(largest >= 200'000);
  f.call("process.kill", {{"process_id", started["process_id"]}});
}

TEST_CASE("a start refuses sandbox directories that are symlinks and leaves their targets alone") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  SandboxFixture f;
  HostTarget host;
  REQUIRE(f.exec("true")["exit_code"] == 0);
  auto sandbox = f.manager->find("test");
  REQUIRE(sandbox);
  struct stat before = host.file_stat();
  // What a process of the sandbox uid could do where it owns the directory
  // (an older layout, or a server that does not stage): tmp a symlink to a
  // host file, etc one to a host directory. Then the agent dies and the
  // next call starts it again.
  sandbox->client()->stop();
  replace_with_symlink(sandbox->dirs().tmp(), host.file);
  replace_with_symlink(sandbox->dirs().etc(), host.dir);
  try {
    f.exec("true");
    FAIL("the start went ahead on symlinked directories");
  } catch (const SandboxError& e) {
    CHECK(e.code() == codes::kSandboxStartFailed);
    CHECK_THAT(e.what(), Catch::Contains("symlink"));
  }
  struct stat after = host.file_stat();
  CHECK(after.st_mode == before.st_mode);
  CHECK(after.st_uid == before.st_uid);
  CHECK(after.st_gid == before.st_gid);
  CHECK(after.st_size == static_cast<off_t>(kHostSize));
  CHECK_FALSE(fs::exists(host.dir / "passwd"));
  CHECK_FALSE(fs::exists(host.dir / "hosts"));
}

TEST_CASE("a teardown and a destroy delete the symlinks the box planted, never their targets") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  SandboxFixture f;
  HostTarget host;
  std::string d = host.dir.string(), file = host.file.string();
  std::string plant = "mkdir -p /workspace/a/b && ln -s " + d + " /workspace/dir-link && ln -s " + file +
                      " /workspace/a/b/file-link && ln -s " + d + " /home/user/dir-link && ln -s " + d +
                      " /tmp/dir-link && ln -s " + file + " /tmp/file-link && echo planted";
  REQUIRE(f.exec(plant)["stdout"] == "planted\n");
  struct stat before = host.file_stat();
  REQUIRE(f.manager->teardown("test"));
  REQUIRE(f.exec("ls /workspace/a/b")["stdout"] == "file-link\n");  // restored, links and all
  REQUIRE(f.manager->destroy("test"));
  // The trash is deleted in the background: give it a moment.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto trash_left = [&] {
    for (const auto& e : fs::directory_iterator(f.state_dir / "sandboxes"))
      if (e.path().filename().string().rfind(".trash-", 0) == 0) return true;
    return false;
  };
  while (trash_left() && std::chrono::steady_clock::now() < until) usleep(20'000);
  CHECK_FALSE(trash_left());
  struct stat after = host.file_stat();
  CHECK(after.st_mode == before.st_mode);
  CHECK(after.st_uid == before.st_uid);
  CHECK(fs::file_size(host.file) == kHostSize);
}
