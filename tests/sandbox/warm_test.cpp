// The warm cache (docs/design.md section 9, "Warm restore"): an idle
// teardown keeps the stopped workspace on disk as the warm copy of its
// snapshot (as root the sandbox's whole disk image, unmounted and renamed;
// as a normal user its directories, moved aside), the next call starts on
// it without extracting, and a copy that changed, is gone or does not mount
// is never used: the archive is. --warm-cache bounds the copies together,
// least recently parked dropped first, also at a server's start.
#include "fixture.h"

#include "persistence/catalog.h"

#include <fcntl.h>
#include <map>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
using agentbox::persistence::SandboxState;
namespace fs = std::filesystem;

namespace {

ManagerOptions warm_options(std::optional<std::uint64_t> budget = std::nullopt) {
  ManagerOptions o;
  o.disk.bytes = 64ull << 20;
  o.spare = ManagerOptions::Spare::None;
  o.warm_cache = budget;
  return o;
}

// Where the warm copy of a sandbox is parked: the image (root) or the directory.
fs::path parked_path(SandboxFixture& f, const std::string& id) {
  fs::path root = f.state_dir / "sandboxes" / id;
  if (f.manager->disks().support().enabled) return f.manager->disks().parked_image(root);
  return root / ".warm";
}

std::string restore_notice(SandboxFixture& f, const std::string& conversation = "test") {
  return f.manager->acquire(conversation).notice();
}

std::string read_file(SandboxFixture& f, const std::string& path, const std::string& conversation = "test") {
  return f.call("file.read", {{"path", path}}, conversation)["content"];
}

ManagerOptions again(SandboxFixture& f, ManagerOptions o) {
  o.state_dir = f.state_dir;
  o.agent_binary = f.manager->options().agent_binary;
  o.agent_args = f.manager->options().agent_args;
  return o;
}

}  // namespace

TEST_CASE("an idle teardown keeps the workspace warm and the next call starts on it without extracting") {
  SandboxFixture f(warm_options());
  f.exec("mkdir -p /workspace/src && echo kept > /workspace/src/a && echo mine > ~/.profile_note && "
         "echo scratch > /tmp/scratch");
  std::string id = f.manager->find("test")->id();
  REQUIRE(f.manager->teardown("test"));
  auto warm = f.manager->catalog().find_warm(id);
  REQUIRE(warm);
  auto snapshot = f.manager->catalog().latest_snapshot(id);
  REQUIRE(snapshot);
  CHECK(warm->snapshot == snapshot->id);
  CHECK(warm->bytes > 0);
  CHECK(fs::exists(parked_path(f, id)));
  CHECK_FALSE(fs::exists(f.state_dir / "sandboxes" / id / "workspace"));  // nothing live while it is parked
  if (f.manager->disks().support().enabled) {
    CHECK_FALSE(fs::exists(f.manager->disks().image(f.state_dir / "sandboxes" / id)));
    CHECK_FALSE(disk_usage(f.state_dir / "sandboxes" / id));  // unmounted, its loop device let go
  }

  std::string notice = restore_notice(f);
  INFO(notice);
  CHECK(notice.find("from its warm copy") != std::string::npos);
  CHECK(read_file(f, "/workspace/src/a") == "kept\n");
  CHECK(read_file(f, "/home/user/.profile_note") == "mine\n");
  // /tmp is what a restore from the archive gives: empty.
  CHECK(f.exec("ls -A /tmp | wc -l")["stdout"] == "0\n");
  CHECK_FALSE(f.manager->catalog().find_warm(id));  // the row went before the box ran on it
  CHECK_FALSE(fs::exists(parked_path(f, id)));
  CHECK(f.manager->record("test")->state == SandboxState::Active);
  // And again: a second teardown parks the new state.
  f.exec("echo two > /workspace/src/a");
  REQUIRE(f.manager->teardown("test"));
  CHECK(restore_notice(f).find("from its warm copy") != std::string::npos);
  CHECK(read_file(f, "/workspace/src/a") == "two\n");
  // A destroy of a stopped sandbox takes its warm copy with it.
  REQUIRE(f.manager->teardown("test"));
  REQUIRE(fs::exists(parked_path(f, id)));
  REQUIRE(f.manager->destroy("test"));
  CHECK_FALSE(fs::exists(parked_path(f, id)));
  CHECK_FALSE(f.manager->catalog().find_warm(id));
}

TEST_CASE("a warm copy that changed after it was cached is not used: the archive is, and says so") {
  SandboxFixture f(warm_options());
  f.exec("echo from-the-snapshot > /workspace/a");
  std::string id = f.manager->find("test")->id();
  REQUIRE(f.manager->teardown("test"));
  fs::path parked = parked_path(f, id);
  REQUIRE(fs::exists(parked));
  if (f.manager->disks().support().enabled) {
    std::ofstream(parked, std::ios::app | std::ios::binary) << "x";  // any write changes its stamp
  } else {
    std::ofstream(parked / "workspace" / "planted") << "not in the snapshot";
  }
  std::string notice = restore_notice(f);
  INFO(notice);
  CHECK(notice.find("from its archive") != std::string::npos);
  CHECK(notice.find("warm copy was not used") != std::string::npos);
  CHECK(notice.find("changed after it was cached") != std::string::npos);
  CHECK(read_file(f, "/workspace/a") == "from-the-snapshot\n");
  CHECK(f.exec("ls /workspace")["stdout"] == "a\n");
  CHECK_FALSE(fs::exists(parked));
}

TEST_CASE("a warm image whose filesystem is damaged but whose stamp still matches falls back to the archive") {
  SandboxFixture f(warm_options());
  f.exec("echo from-the-snapshot > /workspace/a");
  if (!f.manager->disks().support().enabled) {
    WARN("normal user: no disk images, so no image to damage (plain directories are checked above)");
    return;
  }
  std::string id = f.manager->find("test")->id();
  REQUIRE(f.manager->teardown("test"));
  fs::path parked = parked_path(f, id);
  struct stat before{};
  REQUIRE(stat(parked.c_str(), &before) == 0);
  // Silent damage (a bad disk): the ext4 superblock zeroed, the mtime put
  // back, so only the mount can tell.
  {
    int fd = open(parked.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    std::string zeros(4096, '\0');
    REQUIRE(pwrite(fd, zeros.data(), zeros.size(), 0) == static_cast<ssize_t>(zeros.size()));
    close(fd);
    timespec times[2] = {before.st_atim, before.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, parked.c_str(), times, 0) == 0);
  }
  std::string notice = restore_notice(f);
  INFO(notice);
  CHECK(notice.find("from its archive") != std::string::npos);
  CHECK(notice.find("does not mount") != std::string::npos);
  CHECK(read_file(f, "/workspace/a") == "from-the-snapshot\n");
  CHECK_FALSE(fs::exists(parked));
}

TEST_CASE("a sandbox_restore of another snapshot drops the warm copy and extracts that one") {
  SandboxFixture f(warm_options());
  f.exec("echo one > /workspace/a");
  auto first = f.manager->snapshot("test", "first", {});
  f.exec("echo two > /workspace/a");
  std::string id = f.manager->find("test")->id();
  REQUIRE(f.manager->teardown("test"));
  REQUIRE(f.manager->catalog().find_warm(id));
  f.manager->restore("test", first.record.id, {});
  CHECK(read_file(f, "/workspace/a") == "one\n");
  CHECK_FALSE(f.manager->catalog().find_warm(id));
  CHECK_FALSE(fs::exists(parked_path(f, id)));
}

TEST_CASE("--warm-cache bounds the warm copies: least recently parked dropped first, at start and after a teardown") {
  SandboxFixture f(warm_options());
  std::map<std::string, std::string> ids;
  for (std::string c : {"a", "b", "c"}) {
    f.exec("head -c 3000000 /dev/urandom > /workspace/blob && echo " + c + " > /workspace/name", {}, c);
    ids[c] = f.manager->find(c)->id();
  }
  for (std::string c : {"a", "b", "c"}) REQUIRE(f.manager->teardown(c));
  auto rows = f.manager->catalog().warm_records();
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].sandbox == ids["a"]);  // oldest first
  std::uint64_t two = rows[1].bytes + rows[2].bytes;

  // A server with room for two drops the oldest (a) when it starts.
  ManagerOptions o = again(f, warm_options(two + two / 4));
  f.manager.reset();
  f.manager = std::make_unique<Manager>(o);
  CHECK_FALSE(f.manager->catalog().find_warm(ids["a"]));
  CHECK_FALSE(fs::exists(parked_path(f, ids["a"])));
  CHECK(f.manager->catalog().find_warm(ids["b"]));
  CHECK(f.manager->catalog().find_warm(ids["c"]));
  // a comes back from its archive, b warm (across the restart).
  CHECK(restore_notice(f, "a").find("from its archive") != std::string::npos);
  CHECK(read_file(f, "/workspace/name", "a") == "a\n");
  std::string b_notice = restore_notice(f, "b");
  INFO(b_notice);
  CHECK(b_notice.find("from its warm copy") != std::string::npos);
  CHECK(read_file(f, "/workspace/name", "b") == "b\n");
  // Now c is the only copy; a and b parked again are newer, and the third
  // copy over the bound drops the oldest: c.
  REQUIRE(f.manager->teardown("a"));
  CHECK(f.manager->catalog().find_warm(ids["c"]));
  REQUIRE(f.manager->teardown("b"));
  CHECK(f.manager->catalog().find_warm(ids["a"]));
  CHECK(f.manager->catalog().find_warm(ids["b"]));
  CHECK_FALSE(f.manager->catalog().find_warm(ids["c"]));
  CHECK_FALSE(fs::exists(parked_path(f, ids["c"])));
  CHECK(read_file(f, "/workspace/name", "c") == "c\n");  // from its archive
}

TEST_CASE("--warm-cache 0 keeps no warm copy") {
  SandboxFixture f(warm_options(0));
  f.exec("echo x > /workspace/a");
  std::string id = f.manager->find("test")->id();
  REQUIRE(f.manager->teardown("test"));
  CHECK_FALSE(f.manager->catalog().find_warm(id));
  CHECK_FALSE(fs::exists(parked_path(f, id)));
  CHECK(restore_notice(f).find("from its archive") != std::string::npos);
  CHECK(read_file(f, "/workspace/a") == "x\n");
}

// As root, every box's launcher starts in a copy of the host's mount
// namespace (sandbox/staging.h), which held a copy of every sandbox image
// mounted at that moment: the host's unmount did not reach it, the image's
// loop device stayed attached as long as that other box ran, and the warm
// copy could not be parked ("still attached to a loop device"). The
// launcher now drops those copies.
TEST_CASE("a workspace is kept warm while boxes and a prepared spare started after it still run") {
  ManagerOptions o = warm_options();
  o.spare = ManagerOptions::Spare::Prepared;
  SandboxFixture f(o);
  f.exec("echo first > /workspace/a", {}, "first");
  f.exec("echo second > /workspace/a", {}, "second");  // started while first's image is mounted
  std::string id = f.manager->find("first")->id();
  REQUIRE(f.manager->teardown("first"));
  CHECK(f.manager->catalog().find_warm(id));
  CHECK(restore_notice(f, "first").find("from its warm copy") != std::string::npos);
  CHECK(read_file(f, "/workspace/a", "first") == "first\n");
  CHECK(read_file(f, "/workspace/a", "second") == "second\n");
}
