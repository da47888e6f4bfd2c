// Incremental snapshots (persistence/layers.h, store.h; docs/design.md
// section 9): a snapshot after a small change stores only that change, a
// restore of any snapshot of a chain gives back exactly its tree, and
// removing any snapshot (prune, delete, a destroyed fork source) merges it
// into what depends on it first.
#include "persistence/lifecycle.h"
#include "persistence/recovery.h"
#include "temp_dir.h"
#include "tree_describe.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <thread>

namespace fs = std::filesystem;
using namespace agentbox::persistence;
using namespace agentbox::persistence::test;

namespace {

const std::string kBox = "incbox";

// What a restore must give back: type and mode, size, mtime, content.
std::map<std::string, std::string> view(const fs::path& sandbox) {
  std::map<std::string, std::string> out;
  for (const char* top : {"workspace", "home"})
    for (const auto& [path, m] : describe(sandbox / top))
      out[std::string(top) + "/" + path] = std::to_string(m.mode) + " " + std::to_string(m.size) + " " +
                                           std::to_string(m.mtime_sec) + "." + std::to_string(m.mtime_nsec) + " " +
                                           m.content;
  return out;
}

using Tree = std::map<std::string, std::string>;

// Bytes that do not compress, so sizes compare like real files'.
std::string noise(std::size_t n, unsigned seed) {
  std::string out(n, '\0');
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& c : out) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  return out;
}

// "" when equal, else the first differences (for the failure message).
std::string differ(const Tree& got, const Tree& want) {
  std::string out;
  int shown = 0;
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    if (it == got.end()) out += "missing " + k + "; ";
    else if (it->second.substr(0, 80) != v.substr(0, 80) || it->second != v)
      out += "differs " + k + ": got [" + it->second.substr(0, 60) + "] want [" + v.substr(0, 60) + "]; ";
    else continue;
    if (++shown == 6) return out;
  }
  for (const auto& [k, v] : got)
    if (!want.count(k) && ++shown < 6) out += "extra " + k + "; ";
  return out;
}

struct State {
  State() : dir(fresh_temp_dir("incremental", std::to_string(++counter))), layout{dir}, catalog(layout.catalog()),
            store(layout, catalog) {
    catalog.sandbox_for("inc", [] { return kBox; });
    catalog.set_state(kBox, SandboxState::Active);
    fs::create_directories(ws());
    fs::create_directories(live() / "home");
    for (int d = 0; d < 10; ++d) {
      fs::create_directories(ws() / ("dir" + std::to_string(d)));
      for (int f = 0; f < 20; ++f)
        write_file(ws() / ("dir" + std::to_string(d)) / ("f" + std::to_string(f)), noise(4000, d * 100 + f));
    }
    write_file(live() / "home" / ".profile", "export A=1\n");
    fs::create_symlink("dir0/f0", ws() / "link");
    // Files changed within the racy window (layers.h) before a snapshot are
    // stored again by the next one: let time pass, as it does in a box.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  ~State() {
    std::error_code ec;
    for (int i = 0; i < 100 && fs::exists(dir, ec); ++i) fs::remove_all(dir, ec);
  }
  fs::path live() const { return layout.sandbox(kBox); }
  fs::path ws() const { return live() / "workspace"; }
  SnapshotRecord take() { return store.take(kBox, "", "manual"); }
  // A complete snapshot, one file changed, and the incremental one after it.
  std::pair<SnapshotRecord, SnapshotRecord> two(const std::string& change) {
    auto first = take();
    write_file(ws() / "dir0" / "f0", change);
    return {first, take()};
  }
  std::map<std::string, std::string> restored(const SnapshotRecord& s) {
    store.restore(*catalog.find_snapshot(s.id), std::nullopt);
    return view(live());
  }

  static inline int counter = 0;
  fs::path dir;
  StateLayout layout;
  Catalog catalog;
  SnapshotStore store;
};

// Every kind of change between two snapshots.
void change_everything(const fs::path& ws) {
  write_file(ws / "dir0" / "f1", "rewritten");                    // content and size
  write_file(ws / "new-file", "new");                              // added
  fs::remove(ws / "dir0" / "f2");                                  // deleted
  fs::remove_all(ws / "dir1");                                     // a directory deleted
  fs::remove(ws / "dir2" / "f0");
  fs::create_directories(ws / "dir2" / "f0" / "inner");            // a file became a directory
  write_file(ws / "dir2" / "f0" / "inner" / "x", "x");
  fs::remove_all(ws / "dir3");
  write_file(ws / "dir3", "a directory became a file");
  fs::remove(ws / "link");
  fs::create_symlink("dir4/f4", ws / "link");                      // retargeted
  chmod((ws / "dir5" / "f5").c_str(), 0600);                       // mode only
  fs::rename(ws / "dir6" / "f6", ws / "dir6" / "moved");           // renamed
  // Same size, mtime put back: only the ctime tells.
  struct stat st;
  lstat((ws / "dir7" / "f7").c_str(), &st);
  std::string same = std::string(4000, 'Z') + "7";
  write_file(ws / "dir7" / "f7", same);
  set_mtime(ws / "dir7" / "f7", st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  write_file(ws / "dir8" / "f8", "in a read-only directory");
  chmod((ws / "dir8").c_str(), 0555);
  fs::create_hard_link(ws / "dir9" / "f9", ws / "dir9" / "hard");  // a second link
}

}  // namespace

TEST_CASE("a snapshot after a small change stores only the change and restores exactly") {
  State s;
  auto full = s.take();
  CHECK(full.parent.empty());
  auto before = view(s.live());
  write_file(s.ws() / "dir0" / "f1", "changed");
  auto small = s.take();
  CHECK(small.parent == full.id);
  CHECK(small.bytes * 10 < full.bytes);
  CHECK(small.files == full.files);
  CHECK(s.store.total_bytes(*s.catalog.find_snapshot(small.id)) == full.bytes + small.bytes);
  auto after = view(s.live());
  CHECK(differ(s.restored(full), before) == "");
  CHECK(differ(s.restored(small), after) == "");
}

TEST_CASE("every kind of change comes back from an incremental restore, and the next one builds on it") {
  State s;
  auto first = s.take();
  auto before = view(s.live());
  change_everything(s.ws());
  auto second = s.take();
  REQUIRE(second.parent == first.id);
  auto after = view(s.live());
  CHECK(differ(s.restored(first), before) == "");
  CHECK(differ(s.restored(second), after) == "");
  // The restored tree is the baseline: a change after it is incremental
  // against the restored snapshot, and small.
  write_file(s.ws() / "dir4" / "f3", "after the restore");
  auto third = s.take();
  CHECK(third.parent == second.id);
  CHECK(third.bytes * 5 < first.bytes);
  auto latest = view(s.live());
  chmod((s.ws() / "dir8").c_str(), 0755);
  CHECK(differ(s.restored(first), before) == "");
  CHECK(differ(s.restored(third), latest) == "");
}

TEST_CASE("removing any snapshot of a chain merges it: every other one restores as it was") {
  auto which = GENERATE(0, 1, 2, 3);
  State s;
  std::vector<SnapshotRecord> chain;
  std::vector<std::map<std::string, std::string>> trees;
  for (int i = 0; i < 4; ++i) {
    if (i == 1) change_everything(s.ws());
    if (i >= 2) write_file(s.ws() / ("gen" + std::to_string(i)), std::to_string(i));
    if (i == 3) fs::remove(s.ws() / "gen2");
    chain.push_back(s.take());
    trees.push_back(view(s.live()));
  }
  for (int i = 1; i < 4; ++i) REQUIRE(chain[i].parent == chain[i - 1].id);
  s.store.remove(*s.catalog.find_snapshot(chain[which].id));
  CHECK_FALSE(s.catalog.find_snapshot(chain[which].id));
  CHECK_FALSE(fs::exists(s.layout.root / chain[which].path));
  for (int i = 0; i < 4; ++i) {
    if (i == which) continue;
    INFO("snapshot " << i << " after removing " << which);
    auto now = *s.catalog.find_snapshot(chain[i].id);
    if (i == which + 1) CHECK(now.parent == chain[which].parent);  // merged: it now builds on the removed one's parent
    CHECK(differ(s.restored(now), trees[i]) == "");
  }
}

TEST_CASE("prune keeps the newest and merges the oldest kept one into a complete archive") {
  State s;
  std::vector<SnapshotRecord> taken;
  for (int i = 0; i < 6; ++i) {
    write_file(s.ws() / "counter", std::to_string(i));
    taken.push_back(s.take());
  }
  auto expected = view(s.live());
  auto removed = s.store.prune(kBox, 2);
  CHECK(removed.size() == 4);
  auto kept = s.catalog.snapshots(kBox);
  REQUIRE(kept.size() == 2);
  CHECK(kept[1].id == taken[4].id);
  CHECK(kept[1].parent.empty());  // every older link folded in
  CHECK(kept[0].parent == taken[4].id);
  CHECK(differ(s.restored(kept[0]), expected) == "");
}

TEST_CASE("chains are bounded: after the limit a complete snapshot starts the next") {
  State s;
  s.store.set_max_chain(3);
  std::vector<SnapshotRecord> taken;
  for (int i = 0; i < 5; ++i) {
    write_file(s.ws() / "counter", std::to_string(i));
    taken.push_back(s.take());
  }
  CHECK(taken[0].parent.empty());
  CHECK(taken[1].parent == taken[0].id);
  CHECK(taken[2].parent == taken[1].id);
  CHECK(taken[3].parent.empty());
  CHECK(taken[4].parent == taken[3].id);
}

TEST_CASE("a broken chain fails the restore, naming the missing link, and the live tree stays") {
  State s;
  auto [first, second] = s.two("second");
  auto live = view(s.live());
  SECTION("the parent's row is gone") {
    s.catalog.remove_snapshot(first.id);
    REQUIRE_THROWS_WITH(s.store.restore(*s.catalog.find_snapshot(second.id), std::nullopt),
                        Catch::Contains(first.id) && Catch::Contains("no longer has"));
  }
  SECTION("the parent's archive is damaged") {
    std::fstream f(s.layout.root / first.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("garbage", 7);
    f.close();
    REQUIRE_THROWS_WITH(s.store.restore(*s.catalog.find_snapshot(second.id), std::nullopt),
                        Catch::Contains("digest") || Catch::Contains("corrupt"));
  }
  SECTION("the incremental archive alone is not a snapshot") {
    REQUIRE_THROWS_WITH(extract_archive(s.layout.root / second.path, s.dir / "alone"),
                        Catch::Contains("cannot be restored without it"));
    CHECK_FALSE(fs::exists(s.dir / "alone"));
  }
  CHECK(differ(view(s.live()), live) == "");
}

TEST_CASE("a fork's snapshot that builds on its source's survives the source's destroy") {
  State s;
  auto [first, second] = s.two("forked state");
  auto expected = view(s.live());
  auto shared = s.store.share(second, "forkbox");
  CHECK(shared.parent == first.id);
  REQUIRE(s.catalog.add_fork("inc-fork", shared, {}));
  destroy(s.catalog, s.store, kBox, false, {}, {});
  CHECK_FALSE(s.catalog.find_snapshot(first.id));
  auto fork = *s.catalog.find_snapshot(shared.id);
  CHECK(fork.parent.empty());
  s.store.restore(fork, std::nullopt);
  CHECK(differ(view(s.layout.sandbox("forkbox")), expected) == "");
}

TEST_CASE("recovery removes the file a committed merge replaced") {
  State s;
  auto [first, second] = s.two("second");
  auto expected = view(s.live());
  fs::path old_file = s.layout.root / second.path;
  fs::path keep = s.dir / "pre-merge.tar.zst";
  fs::copy_file(old_file, keep);
  s.store.remove(*s.catalog.find_snapshot(first.id));
  // As if the server died between the catalog's update and the removal.
  fs::copy_file(keep, old_file);
  recover(s.layout, s.catalog);
  CHECK_FALSE(fs::exists(old_file));
  for (const auto& e : fs::directory_iterator(s.layout.snapshots(kBox)))
    CHECK(e.path().filename().string().find("corrupt") == std::string::npos);  // not mistaken for damage
  CHECK(s.catalog.snapshots(kBox).size() == 1);
  CHECK(differ(s.restored(*s.catalog.find_snapshot(second.id)), expected) == "");
}

TEST_CASE("recovery drops a merge that never reached the catalog and links an adopted incremental archive") {
  State s;
  auto [first, second] = s.two("second");
  fs::path dir = s.layout.snapshots(kBox);
  fs::copy_file(s.layout.root / second.path, dir / (second.id + ".abcdef.merged.tar.zst"));
  // An archive the catalog lost: adopted with the parent it names.
  s.catalog.remove_snapshot(second.id);
  auto report = recover(s.layout, s.catalog);
  CHECK_FALSE(fs::exists(dir / (second.id + ".abcdef.merged.tar.zst")));
  auto adopted = s.catalog.find_snapshot(second.id);
  REQUIRE(adopted);
  CHECK(adopted->parent == first.id);
  auto expected = view(s.live());
  CHECK(differ(s.restored(*adopted), expected) == "");
}
