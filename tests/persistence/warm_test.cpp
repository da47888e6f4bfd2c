// The warm cache's storage and its recovery (persistence/warm.h, recovery.h)
// on plain directories: a parked copy is trusted only while its row, its
// stamp and the sandbox's restore target agree; anything else is dropped and
// the archive restores. The sandbox side (disk images, the manager's bound)
// is tests/sandbox/warm_test.cpp.
#include "persistence/lifecycle.h"
#include "persistence/recovery.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

namespace {

const std::string kBox = "warmbox";

struct WarmState {
  WarmState() : layout{fs::temp_directory_path() / ("agentbox-warm-" + std::to_string(getpid()))} {
    fs::remove_all(layout.root);
    fs::create_directories(layout.sandbox(kBox) / "workspace");
    fs::create_directories(layout.sandbox(kBox) / "home");
    fs::create_directories(layout.sandbox(kBox) / "tmp");
    std::ofstream(layout.sandbox(kBox) / "workspace" / "a") << "kept";
    std::ofstream(layout.sandbox(kBox) / "tmp" / "scratch") << "scratch";
    Catalog catalog(layout.catalog());
    catalog.sandbox_for("warm", [] { return kBox; });
    catalog.set_state(kBox, SandboxState::Active);
  }
  ~WarmState() {
    std::error_code ec;
    for (int i = 0; i < 100 && fs::exists(layout.root, ec); ++i) fs::remove_all(layout.root, ec);
  }
  // An idle teardown that parks (the box is not started here).
  TeardownResult tear_down_warm(Catalog& catalog, SnapshotStore& store, ParkedDirs& parked) {
    Teardown t;
    t.sandbox = kBox;
    t.live_dirs = {layout.sandbox(kBox) / "workspace", layout.sandbox(kBox) / "home", layout.sandbox(kBox) / "tmp"};
    t.park = &parked;
    return tear_down(catalog, store, t);
  }
  RestoreResult resume(Catalog& catalog, SnapshotStore& store, ParkedDirs& parked) {
    auto record = catalog.find_sandbox(kBox);
    auto target = resume_target(catalog, *record);
    Restore r;
    r.snapshot = &*target;
    r.warm = &parked;
    auto result = restore(catalog, store, r);
    activate(catalog, kBox, record->state);
    return result;
  }
  StateLayout layout;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("a parked copy comes back whole, and /tmp (which no snapshot holds) does not") {
  WarmState w;
  Catalog catalog(w.layout.catalog());
  SnapshotStore store(w.layout, catalog);
  ParkedDirs parked(w.layout);
  auto t = w.tear_down_warm(catalog, store, parked);
  REQUIRE_FALSE(t.error);
  REQUIRE(t.warm);
  CHECK(catalog.find_warm(kBox)->snapshot == t.snapshot.id);
  CHECK(parked.parked(kBox));
  CHECK_FALSE(fs::exists(w.layout.sandbox(kBox) / "workspace"));
  auto r = w.resume(catalog, store, parked);
  CHECK(r.warm);
  CHECK(r.cache_miss.empty());
  CHECK(slurp(w.layout.sandbox(kBox) / "workspace" / "a") == "kept");
  CHECK_FALSE(fs::exists(w.layout.sandbox(kBox) / "tmp" / "scratch"));
  CHECK_FALSE(parked.parked(kBox));
  CHECK_FALSE(catalog.find_warm(kBox));
}

TEST_CASE("a parked copy with an entry added at its top is refused and the archive restores") {
  WarmState w;
  Catalog catalog(w.layout.catalog());
  SnapshotStore store(w.layout, catalog);
  ParkedDirs parked(w.layout);
  REQUIRE(w.tear_down_warm(catalog, store, parked).warm);
  std::ofstream(parked.dir(kBox) / "workspace" / "planted") << "not in the snapshot";
  auto r = w.resume(catalog, store, parked);
  CHECK_FALSE(r.warm);
  CHECK(r.cache_miss.find("changed") != std::string::npos);
  CHECK(fs::exists(w.layout.sandbox(kBox) / "workspace" / "a"));
  CHECK_FALSE(fs::exists(w.layout.sandbox(kBox) / "workspace" / "planted"));
}

TEST_CASE("recovery drops a warm row whose copy is gone, and a copy no row names") {
  WarmState w;
  {
    Catalog catalog(w.layout.catalog());
    SnapshotStore store(w.layout, catalog);
    ParkedDirs parked(w.layout);
    REQUIRE(w.tear_down_warm(catalog, store, parked).warm);
    fs::remove_all(parked.dir(kBox));  // the row stays, its copy is gone
    auto report = recover(w.layout, catalog);
    CHECK_FALSE(catalog.find_warm(kBox));
    auto r = w.resume(catalog, store, parked);
    CHECK_FALSE(r.warm);
    CHECK(slurp(w.layout.sandbox(kBox) / "workspace" / "a") == "kept");
  }
  {
    Catalog catalog(w.layout.catalog());
    SnapshotStore store(w.layout, catalog);
    ParkedDirs parked(w.layout);
    REQUIRE(w.tear_down_warm(catalog, store, parked).warm);
    catalog.take_warm(kBox);  // a copy no row names (a crash between the two)
    auto report = recover(w.layout, catalog);
    bool said = false;
    for (const auto& line : report.actions) said |= line.find("no catalog row names") != std::string::npos;
    CHECK(said);
    CHECK_FALSE(parked.parked(kBox));
  }
}

TEST_CASE("recovery moves a warm copy back when the archive it copies is gone") {
  WarmState w;
  Catalog catalog(w.layout.catalog());
  SnapshotStore store(w.layout, catalog);
  ParkedDirs parked(w.layout);
  auto t = w.tear_down_warm(catalog, store, parked);
  REQUIRE(t.warm);
  fs::remove(store.file(t.snapshot));
  recover(w.layout, catalog);
  CHECK(catalog.find_sandbox(kBox)->state == SandboxState::Active);
  CHECK(slurp(w.layout.sandbox(kBox) / "workspace" / "a") == "kept");
  CHECK_FALSE(parked.parked(kBox));
}
