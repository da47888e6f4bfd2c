// Root's operations on trees a box wrote (persistence/tree_fs.h, and the
// restore swap in store.cpp): a symlink the box planted, or swapped in while
// root walks, is never followed (docs/design.md section 2).
#include "temp_dir.h"
#include "persistence/store.h"
#include "persistence/tree_fs.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;
using agentbox::persistence::test::fresh_temp_dir;

namespace {

// A host directory with files that must outlive every removal below.
fs::path host_canaries(const fs::path& dir, int n = 20) {
  fs::path host = dir / "host";
  fs::create_directories(host / "nested");
  for (int i = 0; i < n; ++i) std::ofstream(host / ("canary-" + std::to_string(i))) << "host data " << i;
  std::ofstream(host / "nested" / "deep") << "host data";
  return host;
}

std::size_t count_entries(const fs::path& dir) {
  std::size_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) ++n;
  return n;
}

}  // namespace

TEST_CASE("remove_tree unlinks the symlinks it finds, never their targets") {
  fs::path dir = fresh_temp_dir("tree_fs", "symlinks");
  fs::path host = host_canaries(dir);
  std::size_t before = count_entries(host);
  fs::path tree = dir / "tree";
  fs::create_directories(tree / "a" / "b");
  std::ofstream(tree / "a" / "b" / "file") << "box data";
  fs::create_directory_symlink(host, tree / "link-to-dir");
  fs::create_directory_symlink(host, tree / "a" / "b" / "deep-link");
  fs::create_symlink(host / "canary-0", tree / "a" / "link-to-file");
  CHECK_FALSE(remove_tree(tree));
  CHECK_FALSE(fs::exists(fs::symlink_status(tree)));
  CHECK(count_entries(host) == before);
  // The path itself a symlink: the link goes, its target stays.
  fs::create_directory_symlink(host, tree);
  CHECK_FALSE(remove_tree(tree));
  CHECK_FALSE(fs::exists(fs::symlink_status(tree)));
  CHECK(count_entries(host) == before);
  CHECK_FALSE(remove_tree(dir / "absent"));
  fs::remove_all(dir);
}

TEST_CASE("remove_tree removes a tree deeper than one descriptor per level allows") {
  fs::path dir = fresh_temp_dir("tree_fs", "deep");
  fs::path tree = dir / "tree";
  fs::create_directory(tree);
  int fd = open(tree.c_str(), O_RDONLY | O_DIRECTORY);
  for (int level = 0; level < 3 * kMaxTreeDepth + 7; ++level) {
    REQUIRE(mkdirat(fd, "d", 0755) == 0);
    int file = openat(fd, "f", O_CREAT | O_WRONLY, 0644);
    close(file);
    int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = next;
  }
  close(fd);
  CHECK_FALSE(remove_tree(tree));
  CHECK_FALSE(fs::exists(fs::symlink_status(tree)));
  fs::remove_all(dir);
}

TEST_CASE("remove_tree never deletes through a directory flipped to a symlink mid-walk") {
  // A box-uid process swaps tree/sub (a real directory) and tree/link (a
  // symlink to a host directory) with RENAME_EXCHANGE in a loop while root
  // deletes tree: a path-based walk (libstdc++'s remove_all opens and
  // unlinks by path) then descends into the host directory.
  fs::path dir = fresh_temp_dir("tree_fs", "flip");
  fs::path host = host_canaries(dir, 50);
  std::size_t before = count_entries(host);
  for (int round = 0; round < 200 && count_entries(host) == before; ++round) {
    fs::path tree = dir / "tree";
    fs::create_directories(tree / "sub");
    for (int i = 0; i < 50; ++i) std::ofstream(tree / "sub" / ("f" + std::to_string(i))) << i;
    fs::create_directory_symlink(host, tree / "link");
    std::atomic<bool> stop{false};
    std::thread flipper([&] {
      std::string a = (tree / "sub").string(), b = (tree / "link").string();
      while (!stop) renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
    });
    std::error_code ec = remove_tree(tree);
    stop = true;
    flipper.join();
    if (ec) CHECK_FALSE(remove_tree(tree));  // it may give up while the names keep changing, not once they stop
    CHECK_FALSE(fs::exists(fs::symlink_status(tree)));
  }
  CHECK(count_entries(host) == before);
  fs::remove_all(dir);
}

TEST_CASE("tree_disk_bytes counts what the tree's files take, never a symlink's target") {
  fs::path dir = fresh_temp_dir("tree_fs", "bytes");
  fs::path tree = dir / "tree";
  fs::create_directories(tree / "d");
  {
    std::ofstream big(tree / "d" / "big", std::ios::binary);
    big << std::string(1 << 20, 'x');
  }
  fs::create_hard_link(tree / "d" / "big", tree / "hardlink");
  std::ofstream(dir / "host-file", std::ios::binary) << std::string(7'777'777, 'h');
  fs::create_symlink(dir / "host-file", tree / "link");
  fs::create_directory_symlink(dir, tree / "dir-link");
  // A sparse file costs what it holds, not its length.
  int fd = open((tree / "sparse").c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 1LL << 32) == 0);
  close(fd);
  sync();
  std::uint64_t bytes = tree_disk_bytes(tree);
  CHECK(bytes >= (1u << 20));
  CHECK(bytes < 2u << 20);
  CHECK(tree_disk_bytes(dir / "absent") == 0);
  fs::remove_all(dir);
}

TEST_CASE("a restore whose staged workspace is a symlink is refused and the live workspace is kept") {
  // The extracting child runs as the sandbox uid; a compromised one (the
  // helper below stands in for it) leaves staging/workspace a symlink to a
  // host directory. Root must not chown it nor rename it into place.
  fs::path dir = fresh_temp_dir("tree_fs", "restore");
  fs::path host = host_canaries(dir);
  struct stat host_before;
  REQUIRE(stat(host.c_str(), &host_before) == 0);
  StateLayout layout{dir / "state"};
  fs::create_directories(layout.sandbox("sb") / "workspace");
  std::ofstream(layout.sandbox("sb") / "workspace" / "live.txt") << "live data";
  Catalog catalog(layout.catalog());
  SnapshotStore store(layout, catalog);
  fs::path helper = dir / "compromised-helper";
  std::ofstream(helper) << "#!/bin/sh\n"
                        << "# extract DEST OWNER MAX BASELINE N ARCHIVE...: what a compromised child could leave\n"
                        << "mkdir \"$2\" && ln -s '" << host.string() << "' \"$2/workspace\" && mkdir \"$2/home\"\n"
                        << "echo 'OK 1 1 -'\n";
  fs::permissions(helper, fs::perms::owner_all);
  std::string saved = std::getenv("AGENTBOX_ARCHIVE_HELPER") ? std::getenv("AGENTBOX_ARCHIVE_HELPER") : "";
  setenv("AGENTBOX_ARCHIVE_HELPER", helper.c_str(), 1);
  SnapshotRecord snapshot;
  snapshot.id = "snap-x";
  snapshot.sandbox = "sb";
  snapshot.path = "snapshots/sb/snap-x.tar.zst";
  std::optional<std::pair<unsigned, unsigned>> owner;
  if (geteuid() == 0) owner = std::make_pair(65534u, 65534u);
  CHECK_THROWS_WITH(store.restore(snapshot, owner), Catch::Contains("workspace") && Catch::Contains("not a directory"));
  setenv("AGENTBOX_ARCHIVE_HELPER", saved.c_str(), 1);
  fs::path live = layout.sandbox("sb") / "workspace";
  CHECK(fs::is_directory(fs::symlink_status(live)));
  CHECK(fs::exists(live / "live.txt"));
  struct stat host_after;
  REQUIRE(stat(host.c_str(), &host_after) == 0);
  CHECK(host_after.st_uid == host_before.st_uid);
  CHECK(host_after.st_mode == host_before.st_mode);
  CHECK(fs::exists(host / "canary-0"));
  std::error_code ec;
  fs::remove_all(dir, ec);  // the staging directory's trash may still be going
}

TEST_CASE("a restore that cannot swap in every tree puts back the ones it swapped") {
  // Trees are swapped one by one; when a later one fails (here the live home
  // cannot be renamed: immutable), the workspace swapped before it must go
  // back, not stay in the staging directory that is then discarded.
  if (geteuid() != 0) {
    WARN("skipped: making a live tree unrenamable (FS_IMMUTABLE_FL) needs root");
    return;
  }
  fs::path dir = fresh_temp_dir("tree_fs", "swapback");
  StateLayout layout{dir / "state"};
  fs::path live = layout.sandbox("sb");
  fs::create_directories(live / "workspace");
  fs::create_directories(live / "home");
  std::ofstream(live / "workspace" / "live.txt") << "live data";
  Catalog catalog(layout.catalog());
  SnapshotStore store(layout, catalog);
  fs::path helper = dir / "helper";
  std::ofstream(helper) << "#!/bin/sh\n"
                        << "mkdir \"$2\" \"$2/workspace\" \"$2/home\" && echo snap > \"$2/workspace/snap.txt\"\n"
                        << "echo 'OK 1 1 -'\n";
  fs::permissions(helper, fs::perms::owner_all);
  std::string saved = std::getenv("AGENTBOX_ARCHIVE_HELPER") ? std::getenv("AGENTBOX_ARCHIVE_HELPER") : "";
  setenv("AGENTBOX_ARCHIVE_HELPER", helper.c_str(), 1);
  auto set_immutable = [&](bool on) {
    int fd = open((live / "home").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    int flags = 0;
    REQUIRE(ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0);
    flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
    int rc = ioctl(fd, FS_IOC_SETFLAGS, &flags);
    close(fd);
    REQUIRE(rc == 0);
  };
  set_immutable(true);
  SnapshotRecord snapshot;
  snapshot.id = "snap-y";
  snapshot.sandbox = "sb";
  snapshot.path = "snapshots/sb/snap-y.tar.zst";
  CHECK_THROWS_WITH(store.restore(snapshot, std::make_pair(65534u, 65534u)), Catch::Contains("cannot swap in"));
  set_immutable(false);
  setenv("AGENTBOX_ARCHIVE_HELPER", saved.c_str(), 1);
  CHECK(fs::exists(live / "workspace" / "live.txt"));
  CHECK_FALSE(fs::exists(live / "workspace" / "snap.txt"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}
