// The workspace limit (sandbox/disk.h, docs/design.md section 8): as root
// each sandbox's directories are its own ext4 filesystem of the configured
// size and inode count; as a normal user they are plain directories and the
// limit is said to be not enforced. Also what /proc/self/mountinfo shows in
// the box, and the image through idle teardown, restore, destroy and a
// "reboot" (an image that is not mounted when the server starts).
#include "fixture.h"

#include "contract/errors.h"
#include "persistence/catalog.h"
#include "persistence/recovery.h"

#include <sys/statvfs.h>
#include <unistd.h>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
using agentbox::persistence::SandboxState;
namespace fs = std::filesystem;

namespace {

ManagerOptions small_disk(std::uint64_t bytes = 64ull << 20, std::uint64_t inodes = 0) {
  ManagerOptions o;
  o.disk.bytes = bytes;
  o.disk.inodes = inodes;
  o.spare = ManagerOptions::Spare::None;
  return o;
}

std::uint64_t host_free(const fs::path& dir) {
  struct statvfs s{};
  REQUIRE(statvfs(dir.c_str(), &s) == 0);
  return s.f_bavail * s.f_frsize;
}

// As a normal user there is no limit; the test says so loudly, and checks
// that the server says so too.
bool limited(SandboxFixture& f) {
  const auto& support = f.manager->disks().support();
  if (geteuid() != 0) {
    WARN("normal user: " << support.detail);
    CHECK_FALSE(support.enabled);
    CHECK(support.detail.find("not enforced") != std::string::npos);
    return false;
  }
  REQUIRE(support.enabled);  // root on this host: loop devices and mkfs.ext4 must work
  return true;
}

}  // namespace

TEST_CASE("writing past the workspace limit fails with ENOSPC; deleting frees the space") {
  SandboxFixture f(small_disk());
  f.exec("true", {}, "neighbour");
  if (!limited(f)) {
    auto sandbox = f.manager->find("neighbour");
    CHECK_FALSE(disk_usage(sandbox->dirs().root).has_value());
    return;
  }
  std::uint64_t before = host_free(f.state_dir);
  auto r = f.exec("dd if=/dev/zero of=/workspace/big bs=1M count=200 2>&1; stat -c %s /workspace/big");
  std::string out = r["stdout"];
  CHECK(out.find("No space left on device") != std::string::npos);
  std::uint64_t size = std::stoull(out.substr(out.rfind('\n', out.size() - 2) + 1));
  CHECK(size > (48ull << 20));
  CHECK(size <= (64ull << 20));
  CHECK(before - std::min(before, host_free(f.state_dir)) <= (72ull << 20));  // the image grew by at most ~the limit
  auto sandbox = f.manager->find("test");
  CHECK(sandbox->workspace_bytes() >= size);
  try {
    f.call("file.write", {{"path", "/workspace/more"}, {"content", std::string(1 << 20, 'x')}});
    FAIL("file.write past the limit succeeded");
  } catch (const SandboxError& e) {
    CHECK(e.code() == std::string(codes::kNoSpace));
    CHECK(std::string(e.what()).find("workspace limit of 64 MiB") != std::string::npos);
  }
  CHECK(f.exec("echo fine", {}, "neighbour")["stdout"] == "fine\n");  // another sandbox carries on
  f.exec("rm /workspace/big /workspace/more 2>/dev/null; sync");
  CHECK(sandbox->workspace_bytes() < (1ull << 20));
  CHECK(f.call("file.write", {{"path", "/workspace/more"}, {"content", std::string(1 << 20, 'x')}})["created"] == true);
}

TEST_CASE("a sandbox cannot make more files than its inode cap") {
  SandboxFixture f(small_disk(64ull << 20, 2048));
  f.exec("true");
  if (!limited(f)) return;
  auto r = f.exec("mkdir /workspace/many; cd /workspace/many; i=0; while [ $i -lt 5000 ]; do : > f$i || break; "
                  "i=$((i+1)); done 2>&1; echo; ls | wc -l");
  std::string out = r["stdout"];
  CHECK(out.find("No space left on device") != std::string::npos);
  auto count = std::stoul(out.substr(out.rfind('\n', out.size() - 2) + 1));
  CHECK(count < 2048);
  CHECK(count > 1900);
  auto usage = disk_usage(f.manager->find("test")->dirs().root);
  REQUIRE(usage);
  CHECK(usage->used_inodes >= count);
  CHECK(usage->total_inodes == 2048);
  f.exec("rm -r /workspace/many");
  CHECK(f.exec("touch /workspace/again && echo ok")["stdout"] == "ok\n");
}

TEST_CASE("mountinfo inside the box names neither the state directory nor the sandbox id") {
  SandboxFixture f(small_disk());
  std::string info = f.exec("cat /proc/self/mountinfo")["stdout"];
  std::string id = f.manager->find("test")->id();
  if (geteuid() != 0) {
    // Plain bind mounts show their source path: what cannot be hidden here.
    WARN("normal user: mountinfo names the state directory (not hideable without a filesystem per sandbox)");
    return;
  }
  CHECK(info.find(f.state_dir.string()) == std::string::npos);
  CHECK(info.find(id) == std::string::npos);
  CHECK(info.find(" /workspace ") != std::string::npos);
}

namespace {

// Whether the image is there while no server runs: in the disk pool
// (disk_pool.h), which the last server out unmounts, mounted for the look.
bool image_kept(const fs::path& state, const fs::path& image) {
  if (!fs::exists(state / "disks.pool")) return fs::exists(image);
  CHECK_FALSE(fs::exists(image));  // the pool is not left mounted
  DiskPool pool(state, true);
  return fs::exists(image);
}

}  // namespace

TEST_CASE("the image goes at idle teardown and destroy and comes back at restore and after a reboot") {
  ManagerOptions cold = small_disk();
  cold.warm_cache = 0;  // no warm copy: the image goes (warm_test.cpp has the other case)
  SandboxFixture f(cold);
  f.call("file.write", {{"path", "/workspace/kept"}, {"content", "one"}});
  if (!limited(f)) return;
  auto sandbox = f.manager->find("test");
  fs::path root = sandbox->dirs().root;
  fs::path image = f.manager->disks().image(root);
  CHECK(fs::exists(image));
  REQUIRE(disk_usage(root));
  REQUIRE(f.manager->teardown("test"));
  CHECK_FALSE(fs::exists(image));  // discarded whole once the snapshot is recorded
  CHECK_FALSE(disk_usage(root));
  CHECK(f.call("file.read", {{"path", "/workspace/kept"}})["content"] == "one");  // restored into a fresh one
  CHECK(disk_usage(root));
  CHECK(fs::exists(image));

  // A "reboot": the server goes (its shutdown unmounts), the image stays.
  f.call("file.write", {{"path", "/workspace/kept"}, {"content", "two"}});
  ManagerOptions again = small_disk();
  again.state_dir = f.state_dir;
  again.agent_binary = f.manager->options().agent_binary;
  again.agent_args = f.manager->options().agent_args;
  f.manager.reset();
  CHECK(image_kept(f.state_dir, image));
  CHECK_FALSE(disk_usage(root));
  f.manager = std::make_unique<Manager>(again);
  CHECK(disk_usage(root));  // mounted at start, before recovery looked
  CHECK(f.call("file.read", {{"path", "/workspace/kept"}})["content"] == "two");
  CHECK(f.manager->record("test")->state == SandboxState::Active);

  REQUIRE(f.manager->destroy("test"));
  CHECK_FALSE(fs::exists(image));
  CHECK_FALSE(fs::exists(root));
}

TEST_CASE("a server's shutdown unmounts the images it mounted at start and never used") {
  SandboxFixture f(small_disk());
  f.exec("true", {}, "unused");
  if (!limited(f)) return;
  fs::path root = f.manager->find("unused")->dirs().root;
  ManagerOptions again = small_disk();
  again.state_dir = f.state_dir;
  again.agent_binary = f.manager->options().agent_binary;
  again.agent_args = f.manager->options().agent_args;
  f.manager.reset();
  f.manager = std::make_unique<Manager>(again);
  CHECK(disk_usage(root));  // mounted before recovery
  f.manager.reset();
  CHECK_FALSE(disk_usage(root));  // no mount is left behind for a sandbox no one drives
  CHECK(image_kept(f.state_dir, root.parent_path().parent_path() / "disks" / (root.filename().string() + ".img")));
}

// A server killed after a destroy's tombstone (Catalog::begin_destroy) and
// before the image went: the next server's recovery finishes the destroy,
// and that includes the sandbox's own filesystem (disk.h recovery_hooks).
TEST_CASE("recovery that finishes a destroy drops the sandbox's image too") {
  SandboxFixture f(small_disk());
  f.exec("echo x > /workspace/f");
  if (!limited(f)) return;
  auto sandbox = f.manager->find("test");
  fs::path root = sandbox->dirs().root;
  std::string id = sandbox->id();
  fs::path image = f.manager->disks().image(root);
  ManagerOptions again = small_disk();
  again.state_dir = f.state_dir;
  again.agent_binary = f.manager->options().agent_binary;
  again.agent_args = f.manager->options().agent_args;
  f.manager.reset();
  {
    persistence::Catalog catalog(persistence::StateLayout{f.state_dir}.catalog());
    catalog.begin_destroy(id, false);  // where the killed server stopped
  }
  REQUIRE(image_kept(f.state_dir, image));
  f.manager = std::make_unique<Manager>(again);  // recovery runs in the constructor
  CHECK_FALSE(f.manager->record("test"));
  CHECK_FALSE(disk_usage(root));
  CHECK_FALSE(fs::exists(image));
  CHECK_FALSE(fs::exists(root));
}
