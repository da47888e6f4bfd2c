// Catalog: schema migrations, the conversation mapping, two writers at once;
// the per-sandbox lock.
#include "temp_dir.h"
#include "persistence/catalog.h"
#include "persistence/sandbox_lock.h"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <atomic>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

namespace {

fs::path temp_dir(const std::string& name) { return test::fresh_temp_dir("catalog", name); }

void raw_exec(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open(db.c_str(), &h);
  REQUIRE(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(h);
}

// The state column's text as stored, read past the catalog.
std::string raw_state(const fs::path& db, const std::string& id) {
  sqlite3* h = nullptr;
  sqlite3_open(db.c_str(), &h);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h, "SELECT state FROM sandboxes WHERE id = ?", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  std::string out = sqlite3_step(st) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0)) : "";
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

}  // namespace

TEST_CASE("a new catalog is at the current schema version, in WAL mode") {
  fs::path dir = temp_dir("new");
  Catalog catalog(dir / "c.db");
  CHECK(catalog.schema_version() == Catalog::kSchemaVersion);
  CHECK(fs::exists(dir / "c.db-wal"));
  fs::remove_all(dir);
}

TEST_CASE("a version-1 catalog is migrated and keeps its rows") {
  fs::path dir = temp_dir("migrate");
  raw_exec(dir / "c.db", R"(
    CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, created_at TEXT NOT NULL,
                            updated_at TEXT NOT NULL, owner_pid INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE conversations (id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL UNIQUE REFERENCES sandboxes(id) ON DELETE CASCADE,
                                created_at TEXT NOT NULL);
    CREATE TABLE sessions (sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE, name TEXT NOT NULL,
                           cwd TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY (sandbox_id, name));
    CREATE TABLE snapshots (id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, created_at TEXT NOT NULL, bytes INTEGER NOT NULL,
                            files INTEGER NOT NULL, digest TEXT NOT NULL, label TEXT, path TEXT NOT NULL);
    INSERT INTO sandboxes VALUES ('sb1', 'stopped', 't', 't', 0);
    INSERT INTO conversations VALUES ('conv', 'sb1', 't');
    INSERT INTO snapshots VALUES ('snap-1', 'sb1', '2026-01-01T00:00:00.000Z', 10, 2, 'sha256:ab', 'keep', 'snapshots/sb1/snap-1.tar.zst');
    PRAGMA user_version=1;)");
  Catalog catalog(dir / "c.db");
  CHECK(catalog.schema_version() == Catalog::kSchemaVersion);
  auto sb = catalog.find_by_conversation("conv");
  REQUIRE(sb);
  CHECK(sb->state == SandboxState::Stopped);
  CHECK(sb->restore_snapshot.empty());
  auto snap = catalog.latest_snapshot("sb1");
  REQUIRE(snap);
  CHECK(snap->reason == "manual");
  CHECK(snap->complete);
  CHECK(snap->label == "keep");
  fs::remove_all(dir);
}

TEST_CASE("a catalog newer than this build is refused with a clear message") {
  fs::path dir = temp_dir("newer");
  { Catalog c(dir / "c.db"); }
  raw_exec(dir / "c.db", "PRAGMA user_version=99");
  CHECK_THROWS_WITH(Catalog(dir / "c.db"), Catch::Contains("newer than this agentbox understands"));
  fs::remove_all(dir);
}

TEST_CASE("conversations map to one sandbox with its sessions and snapshots, across reopen") {
  fs::path dir = temp_dir("mapping");
  std::string id;
  {
    Catalog c(dir / "c.db");
    id = c.sandbox_for("conv-1", [] { return std::string("abc"); }).id;
    CHECK(c.sandbox_for("conv-1", [] { return std::string("other"); }).id == id);
    c.save_sessions(id, {{"default", "/workspace/src", "export A=1\nbuiltin cd -- /workspace/src\n"},
                         {"build", "/workspace", "builtin cd -- /workspace\n"}});
    SnapshotRecord s;
    s.id = "snap-x";
    s.sandbox = id;
    s.created_at = iso_now();
    s.digest = "sha256:00";
    s.path = "snapshots/abc/snap-x.tar.zst";
    s.complete = false;
    c.add_snapshot(s);
    CHECK_FALSE(c.latest_snapshot(id));
    c.mark_complete("snap-x");
    c.set_state(id, SandboxState::Stopped);
  }
  Catalog c(dir / "c.db");
  auto sb = c.find_by_conversation("conv-1");
  REQUIRE(sb);
  CHECK(sb->id == "abc");
  CHECK(sb->state == SandboxState::Stopped);
  auto sessions = c.sessions(id);
  REQUIRE(sessions.size() == 2);
  CHECK(sessions[1].name == "default");
  CHECK(sessions[1].cwd == "/workspace/src");
  CHECK(sessions[1].state.find("export A=1") != std::string::npos);
  REQUIRE(c.latest_snapshot(id));
  CHECK(c.latest_snapshot(id)->id == "snap-x");
  c.remove_sandbox(id);
  CHECK_FALSE(c.find_by_conversation("conv-1"));
  CHECK(c.sessions(id).empty());
  fs::remove_all(dir);
}

// The network policy a sandbox runs under (docs/network.md, "The policy in
// force"): kept across reopen, inherited by a fork, gone with its sandbox.
TEST_CASE("a sandbox's network policy row is kept, inherited by a fork and removed with the sandbox") {
  fs::path dir = temp_dir("network-policy");
  {
    Catalog c(dir / "c.db");
    std::string id = c.sandbox_for("conv-1", [] { return std::string("src"); }).id;
    CHECK_FALSE(c.network_policy(id));
    c.set_network_policy(id, "conv-1", R"({"allow":["a.test"]})");
    c.inherit_network_policy(id, "fork1");
    c.inherit_network_policy("no-such-sandbox", "fork2");  // nothing to inherit: no row
    CHECK_FALSE(c.network_policy("fork2"));
  }
  Catalog c(dir / "c.db");
  auto kept = c.network_policy("src");
  REQUIRE(kept);
  CHECK(kept->key == "conv-1");
  CHECK(kept->policy == R"({"allow":["a.test"]})");
  CHECK_FALSE(kept->applied_at.empty());
  auto inherited = c.network_policy("fork1");
  REQUIRE(inherited);
  CHECK(inherited->key == "conv-1");  // the source's conversation entry, not the fork's own
  c.set_network_policy("src", "conv-1", R"({"allow":["b.test"]})");
  CHECK(c.network_policy("src")->policy == R"({"allow":["b.test"]})");
  CHECK(c.network_policy("fork1")->policy == R"({"allow":["a.test"]})");
  c.remove_sandbox("src");
  CHECK_FALSE(c.network_policy("src"));
  CHECK(c.network_policy("fork1"));
  fs::remove_all(dir);
}

// The stored words are the on-disk format: a state directory of any earlier
// version must read the same, and one written by a newer version with a
// state this build does not know keeps that text.
TEST_CASE("sandbox states are stored as the words earlier versions wrote; unknown ones are kept as stored") {
  fs::path dir = temp_dir("states");
  fs::path db = dir / "c.db";
  Catalog c(db);
  std::string id = c.sandbox_for("conv", [] { return std::string("sb1"); }).id;
  CHECK(raw_state(db, id) == "none");
  const std::pair<SandboxState, const char*> words[] = {
      {SandboxState::Active, "active"},         {SandboxState::Snapshotting, "snapshotting"},
      {SandboxState::Stopped, "stopped"},       {SandboxState::Restoring, "restoring"},
      {SandboxState::Starting, "starting"},     {SandboxState::None, "none"}};
  for (const auto& [state, word] : words) {
    c.set_state(id, state);
    CHECK(raw_state(db, id) == word);
    CHECK(c.find_sandbox(id)->state == state);
  }
  c.begin_destroy(id, true);
  CHECK(raw_state(db, id) == "clearing");
  raw_exec(db, "UPDATE sandboxes SET state = 'hibernating', restore_snapshot = 'snap-1' WHERE id = 'sb1'");
  auto before = c.find_sandbox(id);
  REQUIRE(before);
  CHECK(before->state == SandboxState::Unknown);
  CHECK(stored_state(*before) == "hibernating");
  CHECK_THROWS(c.set_state(id, SandboxState::Unknown));
  c.set_state(id, SandboxState::Restoring, "snap-2");
  c.put_back_state(*before);
  CHECK(raw_state(db, id) == "hibernating");
  CHECK(c.find_sandbox(id)->restore_snapshot == "snap-1");
  c.begin_destroy(id, false);
  CHECK(raw_state(db, id) == "destroying");
  c.drop_destroyed(id);
  CHECK_FALSE(c.find_sandbox(id));
  fs::remove_all(dir);
}

TEST_CASE("two processes creating the same conversation's sandbox at once get one row") {
  fs::path dir = temp_dir("race");
  { Catalog c(dir / "c.db"); }
  constexpr int kProcs = 4;
  int fds[kProcs][2];
  pid_t pids[kProcs];
  for (int i = 0; i < kProcs; ++i) {
    REQUIRE(pipe(fds[i]) == 0);
    pids[i] = fork();
    if (pids[i] == 0) {
      Catalog c(dir / "c.db");
      std::string out;
      for (int n = 0; n < 50; ++n) {
        auto r = c.sandbox_for("conv-" + std::to_string(n),
                               [i, n] { return "p" + std::to_string(i) + "-" + std::to_string(n); });
        out += r.id + "\n";
      }
      (void)!write(fds[i][1], out.data(), out.size());
      _exit(0);
    }
    close(fds[i][1]);
  }
  std::vector<std::string> results(kProcs);
  for (int i = 0; i < kProcs; ++i) {
    char buf[8192];
    ssize_t n;
    while ((n = read(fds[i][0], buf, sizeof buf)) > 0) results[i].append(buf, static_cast<std::size_t>(n));
    close(fds[i][0]);
    int status;
    waitpid(pids[i], &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int i = 1; i < kProcs; ++i) CHECK(results[i] == results[0]);
  Catalog c(dir / "c.db");
  CHECK(c.sandboxes().size() == 50);
  fs::remove_all(dir);
}

TEST_CASE("a sandbox lock is exclusive, waits, and dies with its holder") {
  fs::path dir = temp_dir("lock");
  SandboxLock first;
  REQUIRE(SandboxLock::acquire(dir / "x.lock", std::chrono::milliseconds(0), first));
  SandboxLock second;
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(SandboxLock::acquire(dir / "x.lock", std::chrono::milliseconds(200), second));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(200));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first.release();
  });
  CHECK(SandboxLock::acquire(dir / "x.lock", std::chrono::seconds(5), second));
  releaser.join();
  second.release();

  pid_t child = fork();
  if (child == 0) {
    SandboxLock held;
    SandboxLock::acquire(dir / "y.lock", std::chrono::milliseconds(0), held);
    pause();
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  SandboxLock mine;
  CHECK_FALSE(SandboxLock::acquire(dir / "y.lock", std::chrono::milliseconds(50), mine));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK(SandboxLock::acquire(dir / "y.lock", std::chrono::milliseconds(500), mine));
  fs::remove_all(dir);
}

TEST_CASE("exposed ports are kept by conversation; a host port has one owner") {
  fs::path dir = temp_dir("ports");
  {
    Catalog catalog(dir / "c.db");
    CHECK(catalog.exposed_ports("").empty());
    catalog.add_exposed_port({"conv-b", 8000, 41001, "127.0.0.1", ""});
    catalog.add_exposed_port({"conv-a", 8080, 41002, "127.0.0.1", ""});
    catalog.add_exposed_port({"conv-a", 3000, 41003, "127.0.0.1", ""});
    // Again for the same port: replaced (a new host port), not added.
    catalog.add_exposed_port({"conv-a", 3000, 41004, "127.0.0.1", ""});
    auto a = catalog.exposed_ports("conv-a");
    REQUIRE(a.size() == 2);
    CHECK(a[0].port == 3000);
    CHECK(a[0].host_port == 41004);
    CHECK_FALSE(a[0].created_at.empty());
    CHECK(a[1].port == 8080);
    // Another conversation cannot take a host port that is kept.
    CHECK_THROWS_AS(catalog.add_exposed_port({"conv-c", 9000, 41001, "127.0.0.1", ""}), CatalogError);
    CHECK(catalog.exposed_ports("conv-c").empty());
    CHECK(catalog.remove_exposed_port("conv-a", 8080));
    CHECK_FALSE(catalog.remove_exposed_port("conv-a", 8080));
  }
  // A reopened catalog (a restarted server) has them all.
  Catalog again(dir / "c.db");
  auto all = again.exposed_ports("");
  REQUIRE(all.size() == 2);
  CHECK(all[0].conversation == "conv-a");
  CHECK(all[1].conversation == "conv-b");
  CHECK(all[1].host_port == 41001);
  fs::remove_all(dir);
}
