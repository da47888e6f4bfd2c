#include "persistence/catalog.h"
#include "persistence/catalog_sql.h"

#include <sqlite3.h>

#include <chrono>
#include <ctime>
#include <set>

namespace agentbox::persistence {

namespace {

// Each entry upgrades the schema by one version; never edit a shipped entry,
// append a new one (a database at version N runs entries N..end).
constexpr const char* kMigrations[] = {
    // 1: conversations, sandboxes, sessions, snapshots.
    R"sql(
      CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        owner_pid INTEGER NOT NULL DEFAULT 0);
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL UNIQUE REFERENCES sandboxes(id) ON DELETE CASCADE,
        created_at TEXT NOT NULL);
      CREATE TABLE sessions (
        sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        cwd TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (sandbox_id, name));
      CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        files INTEGER NOT NULL,
        digest TEXT NOT NULL,
        label TEXT,
        path TEXT NOT NULL);
    )sql",
    // 2: why a snapshot was taken, the two-step commit flag, and the index
    // every "latest snapshot" lookup uses.
    R"sql(
      ALTER TABLE snapshots ADD COLUMN reason TEXT NOT NULL DEFAULT 'manual';
      ALTER TABLE snapshots ADD COLUMN complete INTEGER NOT NULL DEFAULT 1;
      ALTER TABLE sandboxes ADD COLUMN restore_snapshot TEXT NOT NULL DEFAULT '';
      ALTER TABLE sandboxes ADD COLUMN lost_processes TEXT NOT NULL DEFAULT '[]';
      CREATE INDEX snapshots_by_sandbox ON snapshots(sandbox_id, created_at);
    )sql",
    // 3: the host uid/gid of each sandbox (docs/design.md section 8, "One
    // host uid per sandbox"). Not a column of sandboxes: a spare gets its ids
    // before its row exists. Sandboxes from before ran as 65534 and keep it
    // (legacy, not unique) while their files exist.
    R"sql(
      CREATE TABLE host_ids (
        sandbox_id TEXT PRIMARY KEY,
        uid INTEGER NOT NULL,
        gid INTEGER NOT NULL,
        legacy INTEGER NOT NULL DEFAULT 0);
      CREATE UNIQUE INDEX host_ids_uid ON host_ids(uid) WHERE legacy = 0;
      CREATE UNIQUE INDEX host_ids_gid ON host_ids(gid) WHERE legacy = 0;
      INSERT INTO host_ids (sandbox_id, uid, gid, legacy) SELECT id, 65534, 65534, 1 FROM sandboxes;
    )sql",
    // 4: stopped workspaces kept ready on disk (docs/design.md section 9,
    // "Warm restore"): which snapshot a sandbox's parked storage holds.
    R"sql(
      CREATE TABLE warm (
        sandbox_id TEXT PRIMARY KEY,
        snapshot_id TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        stamp TEXT NOT NULL,
        cached_at TEXT NOT NULL);
    )sql",
    // 5: incremental snapshots (docs/design.md section 9, "Incremental
    // snapshots"): the snapshot an archive holds the changes since, '' for a
    // full one. Any snapshot row, also of another sandbox (a fork's).
    R"sql(
      ALTER TABLE snapshots ADD COLUMN parent TEXT NOT NULL DEFAULT '';
      CREATE INDEX snapshots_by_parent ON snapshots(parent) WHERE parent != '';
    )sql",
    // 6: the network policy each sandbox runs under (docs/network.md, "The
    // policy in force"): whose `conversations` entry applies (its own
    // conversation's, or a fork's source's) and the policy as last applied.
    R"sql(
      CREATE TABLE network_policies (
        sandbox_id TEXT PRIMARY KEY,
        policy_key TEXT NOT NULL,
        policy TEXT NOT NULL,
        applied_at TEXT NOT NULL);
    )sql",
    // 7: exposed ports (docs/design.md section 12): a conversation's port
    // inside its box and the host port its URL has. Kept by conversation,
    // so the URL outlives a teardown, a restore and a destroy (then it
    // answers 502 until the conversation's next box serves the port).
    R"sql(
      CREATE TABLE exposed_ports (
        conversation_id TEXT NOT NULL,
        port INTEGER NOT NULL,
        host_port INTEGER NOT NULL,
        address TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, port));
      CREATE UNIQUE INDEX exposed_ports_by_host ON exposed_ports(address, host_port);
    )sql",
    // 8: code contexts (docs/design.md section 12) and the successful cells
    // of each, replayed into a new interpreter after the box forgot it.
    R"sql(
      CREATE TABLE code_contexts (
        sandbox_id TEXT NOT NULL,
        id TEXT NOT NULL,
        language TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (sandbox_id, id));
      CREATE TABLE code_cells (
        sandbox_id TEXT NOT NULL,
        context_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        code TEXT NOT NULL,
        PRIMARY KEY (sandbox_id, context_id, seq));
    )sql",
    // 9: the snapshot store (s3_store.h): destroyed conversations whose
    // manifest and archives in the store are still to be deleted (a store
    // that was down at the destroy), so a later first call never brings a
    // destroyed conversation back.
    R"sql(
      CREATE TABLE store_erasures (
        conversation_id TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, sandbox_id));
    )sql",
};
static_assert(std::size(kMigrations) == Catalog::kSchemaVersion);

constexpr const char* kSandboxColumns =
    "s.id, c.id, s.state, s.created_at, s.updated_at, s.owner_pid, s.restore_snapshot, s.lost_processes FROM sandboxes s "
    "LEFT JOIN conversations c ON c.sandbox_id = s.id";

// The text a state is stored as (sandbox_state.h); the catalog stores no
// guess for a state it could not read.
std::string stored_text(SandboxState state) {
  if (state == SandboxState::Unknown) throw std::invalid_argument("catalog: no text to store for an unknown state");
  return std::string(state_name(state));
}

SandboxRecord read_sandbox(const Statement& st) {
  std::string state = st.text(2);
  SandboxRecord r{st.text(0), st.text(1), parse_state(state), st.text(3), st.text(4), st.integer(5), st.text(6), st.text(7)};
  if (r.state == SandboxState::Unknown) r.unknown_state = std::move(state);
  return r;
}

constexpr const char* kSnapshotColumns =
    "SELECT id, sandbox_id, created_at, bytes, files, digest, label, path, reason, complete, parent FROM snapshots";

SnapshotRecord read_snapshot(const Statement& st) {
  SnapshotRecord r;
  r.id = st.text(0);
  r.sandbox = st.text(1);
  r.created_at = st.text(2);
  r.bytes = static_cast<std::uint64_t>(st.integer(3));
  r.files = static_cast<std::uint64_t>(st.integer(4));
  r.digest = st.text(5);
  r.label = st.text(6);
  r.path = st.text(7);
  r.reason = st.text(8);
  r.complete = st.integer(9) == 1;
  r.removing = st.integer(9) == 2;
  r.parent = st.text(10);
  return r;
}

}  // namespace

bool CatalogError::disk_full() const { return code_ == SQLITE_FULL; }

std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  return iso_time(ms / 1000, static_cast<long>(ms % 1000) * 1'000'000);
}

std::string iso_time(std::int64_t seconds, long nanoseconds) {
  std::int64_t ms = seconds * 1000 + nanoseconds / 1'000'000;
  std::time_t secs = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03lldZ", static_cast<long long>(ms % 1000));
  return buf;
}

Catalog::Catalog(const std::filesystem::path& file) : file_(file) {
  int rc = sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw CatalogError("cannot open the catalog " + file.string() + ": " + why, rc & 0xff);
  }
  // Another server may hold the write lock for a moment; wait rather than fail.
  sqlite3_busy_timeout(db_, 10'000);
  exec("PRAGMA journal_mode=WAL");
  // NORMAL in WAL mode survives a process crash (only power loss can drop the
  // last commits, and the recovery pass reconciles files with rows anyway).
  exec("PRAGMA synchronous=NORMAL");
  exec("PRAGMA foreign_keys=ON");
  migrate();
}

Catalog::~Catalog() { sqlite3_close(db_); }

void Catalog::exec(const char* sql) {
  char* error = nullptr;
  if (int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error); rc != SQLITE_OK) {
    std::string why = error ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    throw CatalogError("catalog " + file_.string() + ": " + why, rc & 0xff);
  }
}

int Catalog::schema_version() {
  std::lock_guard lock(mutex_);
  Statement st(db_, "PRAGMA user_version");
  st.step();
  return static_cast<int>(st.integer(0));
}

void Catalog::migrate() {
  transaction([&] {
    int version = schema_version();
    if (version > kSchemaVersion)
      throw CatalogError("the catalog " + file_.string() + " has schema version " + std::to_string(version) +
                         ", newer than this agentbox understands (" + std::to_string(kSchemaVersion) +
                         "); use a newer agentbox or another --state-dir");
    for (int v = version; v < kSchemaVersion; ++v) {
      exec(kMigrations[v]);
      exec(("PRAGMA user_version=" + std::to_string(v + 1)).c_str());
    }
  });
}

SandboxRecord Catalog::sandbox_for(const std::string& conversation, const std::function<std::string()>& new_id) {
  return transaction([&] {
    if (auto existing = find_by_conversation(conversation)) return *existing;
    std::string id = new_id(), now = iso_now();
    Statement(db_, "INSERT INTO sandboxes (id, state, created_at, updated_at) VALUES (?, ?, ?, ?)")
        .bind(1, id).bind(2, stored_text(SandboxState::None)).bind(3, now).bind(4, now).run();
    Statement(db_, "INSERT INTO conversations (id, sandbox_id, created_at) VALUES (?, ?, ?)")
        .bind(1, conversation).bind(2, id).bind(3, now).run();
    return SandboxRecord{id, conversation, SandboxState::None, now, now, 0, "", "[]"};
  });
}

std::optional<SandboxRecord> Catalog::find_by_conversation(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kSandboxColumns + " WHERE c.id = ?").c_str());
  st.bind(1, conversation);
  if (!st.step()) return std::nullopt;
  return read_sandbox(st);
}

std::optional<SandboxRecord> Catalog::find_sandbox(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kSandboxColumns + " WHERE s.id = ?").c_str());
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_sandbox(st);
}

std::vector<SandboxRecord> Catalog::sandboxes() {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kSandboxColumns + " ORDER BY s.created_at").c_str());
  std::vector<SandboxRecord> out;
  while (st.step()) out.push_back(read_sandbox(st));
  return out;
}

std::string stored_state(const SandboxRecord& record) {
  return record.state == SandboxState::Unknown ? record.unknown_state : std::string(state_name(record.state));
}

void Catalog::set_state(const std::string& sandbox, SandboxState state, const std::string& restore_snapshot) {
  std::string text = stored_text(state);
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE sandboxes SET state = ?, restore_snapshot = ?, updated_at = ? WHERE id = ?")
      .bind(1, text).bind(2, restore_snapshot).bind(3, iso_now()).bind(4, sandbox).run();
}

void Catalog::put_back_state(const SandboxRecord& before) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE sandboxes SET state = ?, restore_snapshot = ?, updated_at = ? WHERE id = ?")
      .bind(1, stored_state(before)).bind(2, before.restore_snapshot).bind(3, iso_now()).bind(4, before.id).run();
}

void Catalog::set_owner(const std::string& sandbox, std::int64_t pid) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE sandboxes SET owner_pid = ? WHERE id = ?").bind(1, pid).bind(2, sandbox).run();
}

void Catalog::set_lost_processes(const std::string& sandbox, const std::string& json_array) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE sandboxes SET lost_processes = ? WHERE id = ?").bind(1, json_array).bind(2, sandbox).run();
}

void Catalog::remove_sandbox(const std::string& sandbox) {
  transaction([&] {
    Statement(db_, "DELETE FROM sessions WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM conversations WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM sandboxes WHERE id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM host_ids WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM warm WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM network_policies WHERE sandbox_id = ?").bind(1, sandbox).run();
    drop_code_contexts(sandbox);
  });
}

void Catalog::begin_destroy(const std::string& sandbox, bool keep_snapshots) {
  transaction([&] {
    Statement(db_, "DELETE FROM sessions WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM warm WHERE sandbox_id = ?").bind(1, sandbox).run();
    drop_code_contexts(sandbox);  // their interpreters end with the box
    if (!keep_snapshots) Statement(db_, "DELETE FROM conversations WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "UPDATE sandboxes SET state = ?, restore_snapshot = '', lost_processes = '[]', updated_at = ? "
                   "WHERE id = ?")
        .bind(1, stored_text(keep_snapshots ? SandboxState::Clearing : SandboxState::Destroying))
        .bind(2, iso_now()).bind(3, sandbox).run();
  });
}

void Catalog::drop_destroyed(const std::string& sandbox) {
  transaction([&] {
    Statement(db_, "DELETE FROM snapshots WHERE sandbox_id = ?").bind(1, sandbox).run();
    Statement(db_, "DELETE FROM sandboxes WHERE id = ? AND state = ?")
        .bind(1, sandbox).bind(2, stored_text(SandboxState::Destroying)).run();
    Statement(db_, "DELETE FROM network_policies WHERE sandbox_id = ? AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)")
        .bind(1, sandbox).bind(2, sandbox).run();
    // Its host ids go with its row, once its files are gone (uids are never
    // reused while files they own exist: docs/design.md section 8).
    Statement(db_, "DELETE FROM host_ids WHERE sandbox_id = ? AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)")
        .bind(1, sandbox).bind(2, sandbox).run();
  });
}

void Catalog::adopt_sandbox(const std::string& sandbox, const std::string& conversation, SandboxState state) {
  transaction([&] {
    std::string now = iso_now();
    Statement(db_, "INSERT INTO sandboxes (id, state, created_at, updated_at) VALUES (?, ?, ?, ?)")
        .bind(1, sandbox).bind(2, stored_text(state)).bind(3, now).bind(4, now).run();
    if (!conversation.empty())
      Statement(db_, "INSERT OR IGNORE INTO conversations (id, sandbox_id, created_at) VALUES (?, ?, ?)")
          .bind(1, conversation).bind(2, sandbox).bind(3, now).run();
  });
}

std::string Catalog::damage(const std::filesystem::path& file) {
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  if (ec) return "";  // none yet: a fresh state directory
  if (size == 0) return "it is an empty file";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "";  // cannot open it at all: the constructor reports why, nothing is renamed
  }
  sqlite3_busy_timeout(db, 10'000);
  // Only what says the file itself is bad counts: a busy or full database
  // (another server, a full disk) is never renamed away.
  std::string why;
  bool unsure = false;
  auto query = [&](const char* sql) {
    std::vector<std::string> rows;
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
      auto p = sqlite3_column_text(st, 0);
      rows.emplace_back(p ? reinterpret_cast<const char*>(p) : "");
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE || rc == SQLITE_OK) return rows;
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) why = sqlite3_errstr(rc);
    else unsure = true;
    return rows;
  };
  auto check = query("PRAGMA quick_check");
  if (why.empty() && !unsure && (check.empty() || check[0] != "ok"))
    why = "PRAGMA quick_check: " + (check.empty() ? std::string("no answer") : check[0]);
  if (why.empty() && !unsure) {
    auto version = query("PRAGMA user_version");
    auto tables = query("SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                        "('sandboxes', 'conversations', 'sessions', 'snapshots')");
    // Version 0 with none of our tables is a first migration that rolled back.
    if (!unsure && why.empty() && !version.empty() && version[0] != "0" && tables.size() != 4)
      why = "it is not agentbox's schema (user_version " + version[0] + ", " + std::to_string(tables.size()) +
            " of its 4 tables)";
    if (!unsure && why.empty() && !version.empty() && version[0] == "0" && !tables.empty())
      why = "it holds agentbox tables but no schema version";
  }
  sqlite3_close(db);
  return unsure ? "" : why;
}

void Catalog::save_sessions(const std::string& sandbox, const std::vector<SessionRecord>& sessions) {
  transaction([&] {
    Statement(db_, "DELETE FROM sessions WHERE sandbox_id = ?").bind(1, sandbox).run();
    for (const auto& s : sessions) {
      Statement(db_, "INSERT INTO sessions (sandbox_id, name, cwd, state) VALUES (?, ?, ?, ?)")
          .bind(1, sandbox).bind(2, s.name).bind(3, s.cwd).bind(4, s.state).run();
    }
  });
}

std::vector<SessionRecord> Catalog::sessions(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT name, cwd, state FROM sessions WHERE sandbox_id = ? ORDER BY name");
  st.bind(1, sandbox);
  std::vector<SessionRecord> out;
  while (st.step()) out.push_back({st.text(0), st.text(1), st.text(2)});
  return out;
}

void Catalog::add_snapshot(const SnapshotRecord& r) {
  std::lock_guard lock(mutex_);
  Statement(db_,
            "INSERT INTO snapshots (id, sandbox_id, created_at, bytes, files, digest, label, path, reason, complete, parent) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind(1, r.id).bind(2, r.sandbox).bind(3, r.created_at).bind(4, static_cast<std::int64_t>(r.bytes))
      .bind(5, static_cast<std::int64_t>(r.files)).bind(6, r.digest).bind(7, r.label).bind(8, r.path)
      .bind(9, r.reason).bind(10, std::int64_t{r.complete}).bind(11, r.parent).run();
}

void Catalog::mark_removing(const std::string& snapshot) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE snapshots SET complete = 2 WHERE id = ?").bind(1, snapshot).run();
}

void Catalog::mark_complete(const std::string& snapshot) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE snapshots SET complete = 1 WHERE id = ?").bind(1, snapshot).run();
}

std::vector<SnapshotRecord> Catalog::snapshots(const std::string& sandbox, bool include_incomplete) {
  std::lock_guard lock(mutex_);
  std::string sql = std::string(kSnapshotColumns) + " WHERE (? = '' OR sandbox_id = ?)" +
                    (include_incomplete ? "" : " AND complete = 1") + " ORDER BY created_at DESC, rowid DESC";
  Statement st(db_, sql.c_str());
  st.bind(1, sandbox).bind(2, sandbox);
  std::vector<SnapshotRecord> out;
  while (st.step()) out.push_back(read_snapshot(st));
  return out;
}

std::optional<SnapshotRecord> Catalog::find_snapshot(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string(kSnapshotColumns) + " WHERE id = ?").c_str());
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_snapshot(st);
}

std::optional<SnapshotRecord> Catalog::latest_snapshot(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string(kSnapshotColumns) +
                     " WHERE sandbox_id = ? AND complete = 1 ORDER BY created_at DESC, rowid DESC LIMIT 1")
                        .c_str());
  st.bind(1, sandbox);
  if (!st.step()) return std::nullopt;
  return read_snapshot(st);
}

void Catalog::remove_snapshot(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement(db_, "DELETE FROM snapshots WHERE id = ?").bind(1, id).run();
}

std::optional<HostIds> Catalog::find_host_ids(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT uid, gid, legacy FROM host_ids WHERE sandbox_id = ?");
  st.bind(1, sandbox);
  if (!st.step()) return std::nullopt;
  return HostIds{static_cast<unsigned>(st.integer(0)), static_cast<unsigned>(st.integer(1)), st.integer(2) != 0};
}

HostIds Catalog::host_ids(const std::string& sandbox, const IdRange& range, bool replace_legacy) {
  return transaction([&] {
    auto held = find_host_ids(sandbox);
    if (held && !(held->legacy && replace_legacy)) return *held;
    // The lowest offset into the range whose uid and gid no sandbox holds.
    std::set<std::int64_t> taken;
    Statement st(db_, "SELECT uid - ?, gid - ? FROM host_ids WHERE legacy = 0");
    st.bind(1, std::int64_t{range.uid_start}).bind(2, std::int64_t{range.gid_start});
    while (st.step()) taken.insert({st.integer(0), st.integer(1)});
    std::int64_t free = 0;
    while (taken.count(free)) ++free;
    if (free >= range.count)
      throw CatalogError("no free host uid for a new sandbox: all " + std::to_string(range.count) + " of uids " +
                         std::to_string(range.uid_start) + ".. are held by sandboxes of this state directory; "
                         "destroy some (agentbox sandbox destroy) or give serve a larger --uid-range");
    auto offset = static_cast<std::uint32_t>(free);
    HostIds ids{range.uid_start + offset, range.gid_start + offset, false};
    Statement(db_, "INSERT OR REPLACE INTO host_ids (sandbox_id, uid, gid, legacy) VALUES (?, ?, ?, 0)")
        .bind(1, sandbox).bind(2, std::int64_t{ids.uid}).bind(3, std::int64_t{ids.gid}).run();
    return ids;
  });
}

void Catalog::keep_host_ids(const std::string& sandbox, unsigned uid, unsigned gid) {
  std::lock_guard lock(mutex_);
  Statement(db_, "INSERT OR IGNORE INTO host_ids (sandbox_id, uid, gid, legacy) VALUES (?, ?, ?, 1)")
      .bind(1, sandbox).bind(2, std::int64_t{uid}).bind(3, std::int64_t{gid}).run();
}

void Catalog::release_host_ids(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement(db_, "DELETE FROM host_ids WHERE sandbox_id = ? AND sandbox_id NOT IN (SELECT id FROM sandboxes)")
      .bind(1, sandbox).run();
}

}  // namespace agentbox::persistence
