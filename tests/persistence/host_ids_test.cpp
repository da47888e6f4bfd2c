// Host ids in the catalog (docs/design.md section 8, "One host uid per
// sandbox"): unique under concurrent servers, released only with the
// sandbox's row, legacy 65534 for sandboxes of a catalog from before.
#include "temp_dir.h"
#include "persistence/catalog.h"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

namespace {

constexpr IdRange kRange{2'000'000'000, 2'000'100'000, 1000};

fs::path temp_dir(const std::string& name) { return test::fresh_temp_dir("host-ids", name); }

}  // namespace

TEST_CASE("two servers allocating host ids at once on one state directory never pick the same") {
  fs::path dir = temp_dir("race");
  { Catalog c(dir / "c.db"); }
  constexpr int kProcs = 4, kEach = 40;
  int fds[kProcs][2];
  pid_t pids[kProcs];
  for (int i = 0; i < kProcs; ++i) {
    REQUIRE(pipe(fds[i]) == 0);
    pids[i] = fork();
    if (pids[i] == 0) {
      Catalog c(dir / "c.db");
      std::string out;
      for (int n = 0; n < kEach; ++n) {
        // Half of them for sandboxes with a row, half for spares (no row yet).
        std::string id = "p" + std::to_string(i) + "-" + std::to_string(n);
        if (n % 2) id = c.sandbox_for("conv-" + id, [&] { return id; }).id;
        auto ids = c.host_ids(id, kRange, false);
        out += std::to_string(ids.uid) + " " + std::to_string(ids.gid) + "\n";
      }
      (void)!write(fds[i][1], out.data(), out.size());
      _exit(0);
    }
    close(fds[i][1]);
  }
  std::set<unsigned> uids, gids;
  for (int i = 0; i < kProcs; ++i) {
    std::string text;
    char buf[8192];
    ssize_t n;
    while ((n = read(fds[i][0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    close(fds[i][0]);
    int status;
    waitpid(pids[i], &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::istringstream in(text);
    unsigned uid, gid;
    while (in >> uid >> gid) {
      CHECK(uid >= kRange.uid_start);
      CHECK(uid < kRange.uid_start + kRange.count);
      CHECK(gid - kRange.gid_start == uid - kRange.uid_start);
      uids.insert(uid);
      gids.insert(gid);
    }
  }
  CHECK(uids.size() == kProcs * kEach);
  CHECK(gids.size() == kProcs * kEach);
  fs::remove_all(dir);
}

TEST_CASE("a sandbox keeps its host ids until its row is removed; only then are they handed out again") {
  fs::path dir = temp_dir("release");
  Catalog c(dir / "c.db");
  std::string a = c.sandbox_for("a", [] { return std::string("sa"); }).id;
  std::string b = c.sandbox_for("b", [] { return std::string("sb"); }).id;
  auto ida = c.host_ids(a, kRange, true);
  auto idb = c.host_ids(b, kRange, true);
  CHECK(ida.uid == kRange.uid_start);
  CHECK(idb.uid == kRange.uid_start + 1);
  CHECK_FALSE(ida.legacy);
  // Stable across calls, state changes, a reopen, and a destroy that keeps
  // the snapshots (the row stays).
  c.set_state(a, SandboxState::Stopped);
  c.save_sessions(a, {});
  CHECK(c.host_ids(a, kRange, true).uid == ida.uid);
  {
    Catalog again(dir / "c.db");
    CHECK(again.host_ids(a, kRange, false).uid == ida.uid);
    REQUIRE(again.find_host_ids(a));
    CHECK(again.find_host_ids(a)->gid == ida.gid);
  }
  // release_host_ids is for spares: a sandbox with a row keeps its ids.
  c.release_host_ids(a);
  CHECK(c.find_host_ids(a));
  // A spare's ids, released when it is discarded.
  auto spare = c.host_ids("spare", kRange, false);
  CHECK(spare.uid == kRange.uid_start + 2);
  c.release_host_ids("spare");
  CHECK_FALSE(c.find_host_ids("spare"));
  // Destroy: the row goes, and so do its ids; the next sandbox may have them.
  c.remove_sandbox(a);
  CHECK_FALSE(c.find_host_ids(a));
  std::string d = c.sandbox_for("d", [] { return std::string("sd"); }).id;
  CHECK(c.host_ids(d, kRange, false).uid == ida.uid);
  CHECK(c.host_ids("next", kRange, false).uid == kRange.uid_start + 2);
  fs::remove_all(dir);
}

TEST_CASE("ids recorded for a restore outside the server are legacy and never replace allocated ones") {
  fs::path dir = temp_dir("keep");
  Catalog c(dir / "c.db");
  auto ids = c.host_ids("allocated", kRange, false);
  c.keep_host_ids("allocated", 65534, 65534);
  CHECK(c.find_host_ids("allocated")->uid == ids.uid);
  c.keep_host_ids("unmanaged", 1001, 1001);
  REQUIRE(c.find_host_ids("unmanaged"));
  CHECK(c.find_host_ids("unmanaged")->legacy);
  CHECK(c.host_ids("unmanaged", kRange, false).uid == 1001);  // its files exist
  fs::remove_all(dir);
}

TEST_CASE("a full id range is a clear error") {
  fs::path dir = temp_dir("full");
  Catalog c(dir / "c.db");
  IdRange two{3'000'000'000u, 3'000'000'000u, 2};
  c.host_ids("x", two, false);
  c.host_ids("y", two, false);
  CHECK_THROWS_WITH(c.host_ids("z", two, false), Catch::Contains("no free host uid") && Catch::Contains("--uid-range"));
  fs::remove_all(dir);
}

TEST_CASE("a catalog made before host ids is migrated: its sandboxes keep 65534 until their files are gone") {
  fs::path dir = temp_dir("migrate");
  std::ifstream dump(fs::path(AGENTBOX_TEST_DATA) / "catalog_v2.sql");
  REQUIRE(dump);
  std::stringstream sql;
  sql << dump.rdbuf();
  sqlite3* h = nullptr;
  sqlite3_open((dir / "c.db").c_str(), &h);
  REQUIRE(sqlite3_exec(h, sql.str().c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(h);

  Catalog c(dir / "c.db");
  CHECK(c.schema_version() == Catalog::kSchemaVersion);
  auto live = c.find_by_conversation("live"), idle = c.find_by_conversation("idle");
  REQUIRE(live);
  REQUIRE(idle);
  CHECK(c.snapshots(idle->id).size() == 1);
  for (const auto& id : {live->id, idle->id}) {
    auto ids = c.find_host_ids(id);
    REQUIRE(ids);
    CHECK(ids->uid == 65534);
    CHECK(ids->gid == 65534);
    CHECK(ids->legacy);
    // Files on disk: it stays 65534.
    CHECK(c.host_ids(id, kRange, false).uid == 65534);
  }
  // Two legacy sandboxes share 65534 (not unique); a new one gets the range.
  CHECK(c.host_ids("new", kRange, false).uid == kRange.uid_start);
  // Files gone (torn down or destroyed with keep_snapshots): a fresh pair.
  auto fresh = c.host_ids(idle->id, kRange, true);
  CHECK_FALSE(fresh.legacy);
  CHECK(fresh.uid == kRange.uid_start + 1);
  CHECK(c.find_host_ids(idle->id)->uid == fresh.uid);
  fs::remove_all(dir);
}
