#include "persistence/s3_store.h"

#include "persistence/archive.h"
#include "persistence/sha256.h"
#include "os/errno_text.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <fcntl.h>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "agentbox-store-manifest 1";
constexpr std::uint64_t kMaxManifestBytes = 16u << 20;
constexpr std::uint64_t kMaxArchiveBytes = 1ull << 40;
constexpr auto kSmallTimeout = std::chrono::minutes(2);   // a manifest, a delete
constexpr auto kArchiveTimeout = std::chrono::hours(6);   // a stalled transfer ends sooner (s3_transfer.cpp)

bool matches(const std::string& text, const char* pattern) { return std::regex_match(text, std::regex(pattern)); }

bool archive_name(const std::string& file) {
  return file.size() <= 200 && matches(file, "[A-Za-z0-9][A-Za-z0-9._-]*\\.tar\\.zst");
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw StoreError("cannot write " + file.string());
}

struct TempFile {
  fs::path path;
  ~TempFile() {
    if (!path.empty()) unlink(path.c_str());
  }
};

// A manifest as the store sent it: every field checked before it is used
// (the store is shared, and what it holds may have been written by anyone
// with its credentials).
struct Manifest {
  std::string sandbox;
  std::vector<SnapshotRecord> snapshots;  // parents before children; path holds the file name
  std::vector<SessionRecord> sessions;
  bool cleared = false;  // destroyed keeping its snapshots: its next call starts empty
};

Manifest parse_manifest(const std::string& text, const std::string& conversation) {
  auto bad = [&](const std::string& why) {
    return StoreError("the store's manifest for conversation '" + conversation + "' cannot be used: " + why, true);
  };
  json m = json::parse(text, nullptr, false);
  if (!m.is_object() || m.value("format", json()) != kFormat) throw bad("it is not an agentbox manifest");
  if (m.value("conversation", json()) != conversation) throw bad("it names another conversation");
  Manifest out;
  const json& sandbox = m.value("sandbox", json());
  if (!sandbox.is_string() || !matches(sandbox.get<std::string>(), "[0-9a-f]{12}")) throw bad("bad sandbox id");
  out.sandbox = sandbox.get<std::string>();
  out.cleared = m.value("cleared", json(false)) == json(true);
  const json& snaps = m.value("snapshots", json());
  if (!snaps.is_array() || snaps.size() > 10'000) throw bad("bad snapshot list");
  auto text_field = [&](const json& o, const char* name, std::size_t max) {
    const json& v = o.value(name, json(""));
    if (!v.is_string() || v.get_ref<const std::string&>().size() > max) throw bad(std::string("bad ") + name);
    return v.get<std::string>();
  };
  auto count_field = [&](const json& o, const char* name, std::uint64_t max) {
    const json& v = o.value(name, json());
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max) throw bad(std::string("bad ") + name);
    return v.get<std::uint64_t>();
  };
  std::vector<SnapshotRecord> listed;
  std::set<std::string> ids;
  for (const auto& s : snaps) {
    if (!s.is_object()) throw bad("a snapshot entry is not an object");
    SnapshotRecord r;
    r.id = text_field(s, "id", 64);
    r.parent = text_field(s, "parent", 64);
    r.digest = text_field(s, "digest", 80);
    r.path = text_field(s, "file", 200);
    r.created_at = text_field(s, "created_at", 64);
    r.label = text_field(s, "label", 256);
    r.reason = text_field(s, "reason", 64);
    r.bytes = count_field(s, "bytes", kMaxArchiveBytes);
    r.files = count_field(s, "files", 1ull << 40);
    if (!matches(r.id, "snap-[0-9a-f]{12}") || !ids.insert(r.id).second) throw bad("bad or repeated snapshot id");
    if (!r.parent.empty() && !matches(r.parent, "snap-[0-9a-f]{12}")) throw bad("bad parent of " + r.id);
    if (!matches(r.digest, "sha256:[0-9a-f]{64}")) throw bad("bad digest of " + r.id);
    if (!archive_name(r.path)) throw bad("bad file name of " + r.id);
    static const std::set<std::string> kReasons{"manual", "idle", "recovered", "checkpoint", "fork"};
    if (!kReasons.count(r.reason)) throw bad("bad reason of " + r.id);
    r.sandbox = out.sandbox;
    r.complete = true;
    listed.push_back(std::move(r));
  }
  // Parents first, and every parent listed: a chain restores from these alone.
  std::set<std::string> placed;
  while (out.snapshots.size() < listed.size()) {
    std::size_t before = out.snapshots.size();
    for (const auto& r : listed)
      if (!placed.count(r.id) && (r.parent.empty() || placed.count(r.parent))) {
        placed.insert(r.id);
        out.snapshots.push_back(r);
      }
    if (out.snapshots.size() == before) throw bad("a snapshot's parent is not listed (or parents form a loop)");
  }
  const json& sessions = m.value("sessions", json::array());
  if (!sessions.is_array() || sessions.size() > 256) throw bad("bad session list");
  for (const auto& s : sessions) {
    if (!s.is_object()) throw bad("a session entry is not an object");
    out.sessions.push_back({text_field(s, "name", 256), text_field(s, "cwd", 4096), text_field(s, "state", 1u << 20)});
    if (out.sessions.back().name.empty()) throw bad("a session without a name");
  }
  return out;
}

}  // namespace

std::string parse_store_url(const std::string& url, StoreLocation& out) {
  if (url.rfind("s3://", 0) != 0) return "--snapshot-store takes s3://bucket/prefix, not '" + url + "'";
  std::string rest = url.substr(5);
  auto slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  // S3's bucket naming rules, and a prefix of plain path segments (the keys
  // go into URLs unescaped).
  if (!matches(bucket, "[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"))
    return "'" + bucket + "' is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')";
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!prefix.empty() && (prefix.size() > 512 || !matches(prefix, "[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*") ||
                          matches(prefix, "(.*/)?\\.\\.?(/.*)?")))
    return "the prefix '" + prefix + "' must be path segments of A-Z, a-z, 0-9, '_', '.', '-'";
  out.url = url;
  out.bucket = bucket;
  out.prefix = prefix.empty() ? "" : prefix + "/";
  return "";
}

RemoteStore::RemoteStore(StoreLocation where, const StateLayout& layout, Catalog& catalog)
    : where_(std::move(where)), layout_(layout), catalog_(catalog) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw StoreError(os::errno_text("pipe", errno));
  cancel_read_ = os::UniqueFd(fds[0]);
  cancel_write_ = os::UniqueFd(fds[1]);
}

void RemoteStore::cancel() noexcept {
  char c = 'x';
  [[maybe_unused]] ssize_t n = ::write(cancel_write_.get(), &c, 1);  // never drained: it stays readable
}

std::string RemoteStore::helper(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  try {
    return run_archive_helper(args, timeout, cancel_read_.get());
  } catch (const std::exception& e) {
    throw StoreError(e.what());
  }
}

std::string RemoteStore::manifest_key(const std::string& conversation) const {
  Sha256 sha;
  sha.update(conversation.data(), conversation.size());
  return where_.prefix + "conversations/" + sha.finish().substr(7) + ".json";
}

std::string RemoteStore::object_key(const std::string& sandbox, const std::string& file) const {
  return where_.prefix + "sandboxes/" + sandbox + "/" + file;
}

fs::path RemoteStore::temp(const std::string& what) const {
  fs::path dir = layout_.root / "store";  // a manifest on its way (a crash leaves a few bytes here)
  fs::create_directories(dir);
  return dir / ("store-" + what + "-" + random_hex(12));
}

void RemoteStore::check() { helper({"s3", "check", where_.bucket}, kSmallTimeout); }

std::string RemoteStore::fetch_manifest(const std::string& conversation) {
  TempFile file{temp("manifest")};
  std::string got = helper({"s3", "get", where_.bucket, manifest_key(conversation), file.path.string(),
                            std::to_string(kMaxManifestBytes)},
                           kSmallTimeout);
  if (got.rfind("found ", 0) != 0) return "";
  std::string text = read_text(file.path);
  if (text.empty()) throw StoreError("the store's manifest for conversation '" + conversation + "' is empty", true);
  return text;
}

std::set<std::string> RemoteStore::sync(const SandboxRecord& sandbox) {
  std::map<std::string, std::string> stored;  // file name -> digest, as the manifest in the store says
  std::string old = fetch_manifest(sandbox.conversation);
  if (!old.empty()) {
    json m = json::parse(old, nullptr, false);
    std::string names = m.is_object() && m.value("sandbox", json()).is_string() ? m["sandbox"].get<std::string>() : "";
    if (names != sandbox.id)
      throw StoreError("the store's manifest for conversation '" + sandbox.conversation + "' names sandbox '" + names +
                       "', not this server's " + sandbox.id + ": left as it is (another server serves this "
                       "conversation from the same store; destroy one, or give each its own prefix)");
    for (const auto& s : m.value("snapshots", json::array()))
      if (s.is_object() && s.value("file", json()).is_string() && s.value("digest", json()).is_string())
        stored[s["file"].get<std::string>()] = s["digest"].get<std::string>();
  }
  std::vector<SnapshotRecord> rows;
  for (auto& r : catalog_.snapshots(sandbox.id))
    if (r.complete && !r.removing) rows.push_back(std::move(r));
  if (rows.empty() && old.empty()) return {};
  json list = json::array();
  std::set<std::string> ids, files;
  for (const auto& r : rows) {
    std::string file = fs::path(r.path).filename().string();
    if (!archive_name(file)) continue;  // never named so by the store (store.cpp)
    if (stored.count(file) == 0 || stored[file] != r.digest)
      helper({"s3", "put", where_.bucket, object_key(sandbox.id, file), (layout_.root / r.path).string()}, kArchiveTimeout);
    list.push_back({{"id", r.id}, {"parent", r.parent}, {"digest", r.digest}, {"file", file}, {"bytes", r.bytes},
                    {"files", r.files}, {"created_at", r.created_at}, {"label", r.label}, {"reason", r.reason}});
    ids.insert(r.id);
    files.insert(file);
  }
  json sessions = json::array();
  for (const auto& s : catalog_.sessions(sandbox.id))
    sessions.push_back({{"name", s.name}, {"cwd", s.cwd}, {"state", s.state}});
  json manifest = {{"format", kFormat}, {"conversation", sandbox.conversation}, {"sandbox", sandbox.id},
                   {"updated_at", iso_now()}, {"snapshots", list}, {"sessions", sessions},
                   {"cleared", sandbox.state == SandboxState::None}};
  TempFile file{temp("manifest")};
  write_text(file.path, manifest.dump());
  helper({"s3", "put", where_.bucket, manifest_key(sandbox.conversation), file.path.string()}, kSmallTimeout);
  // Only now may what the old manifest named go: a crash before this point
  // leaves the store restoring the old or the new list, both whole.
  for (const auto& [name, digest] : stored)
    if (!files.count(name) && archive_name(name))
      helper({"s3", "delete", where_.bucket, object_key(sandbox.id, name)}, kSmallTimeout);
  return ids;
}

void RemoteStore::erase(const std::string& conversation, const std::string& sandbox) {
  std::string old = fetch_manifest(conversation);
  if (old.empty()) return;
  json m = json::parse(old, nullptr, false);
  bool ours = !m.is_object() || m.value("sandbox", json()) == sandbox;
  if (!ours) return;  // the conversation lives on in another server's sandbox
  helper({"s3", "delete", where_.bucket, manifest_key(conversation)}, kSmallTimeout);
  if (!m.is_object()) return;
  for (const auto& s : m.value("snapshots", json::array()))
    if (s.is_object() && s.value("file", json()).is_string() && archive_name(s["file"].get<std::string>()))
      helper({"s3", "delete", where_.bucket, object_key(sandbox, s["file"].get<std::string>())}, kSmallTimeout);
}

bool RemoteStore::import(const std::string& conversation) {
  std::string text = fetch_manifest(conversation);
  if (text.empty()) return false;
  Manifest m = parse_manifest(text, conversation);
  if (catalog_.find_sandbox(m.sandbox))
    throw StoreError("the store's manifest for conversation '" + conversation + "' names sandbox " + m.sandbox +
                     ", which this server already has for another conversation");
  fs::path dir = layout_.snapshots(m.sandbox);
  fs::create_directories(dir);
  std::vector<fs::path> placed;
  auto undo = [&] {
    std::error_code ec;
    for (const auto& p : placed) fs::remove(p, ec);
  };
  std::vector<SnapshotRecord> records;
  try {
    for (auto r : m.snapshots) {
      std::string file = r.path;
      fs::path final = dir / file;
      // ".tar.zst.tmp-": what recovery removes if this server dies mid-download.
      TempFile part{dir / (file + ".tmp-" + random_hex(8))};
      std::string got = helper({"s3", "get", where_.bucket, object_key(m.sandbox, file), part.path.string(),
                                std::to_string(r.bytes)},
                               kArchiveTimeout);
      if (got.rfind("found ", 0) != 0)
        throw StoreError("snapshot " + r.id + " of conversation '" + conversation + "' is named by the store's "
                         "manifest but its archive " + object_key(m.sandbox, file) + " is not in the store", true);
      std::string digest = got.substr(6, got.find(' ', 6) - 6);
      if (digest != r.digest)
        throw StoreError("snapshot " + r.id + " from the store does not match its digest (the manifest says " +
                         r.digest + ", the archive is " + digest + "): SNAPSHOT_CORRUPT, nothing was restored", true);
      if (rename(part.path.c_str(), final.c_str()) != 0) throw StoreError("cannot place " + final.string());
      part.path.clear();
      placed.push_back(final);
      r.path = fs::relative(final, layout_.root).string();
      records.push_back(std::move(r));
    }
    record_conversation(layout_, m.sandbox, conversation);
    if (!catalog_.add_imported(conversation, m.sandbox, m.cleared || records.empty() ? SandboxState::None : SandboxState::Stopped, records,
                               m.sessions)) {
      undo();
      return false;  // another call made this conversation's sandbox meanwhile
    }
  } catch (...) {
    undo();
    throw;
  }
  return true;
}

}  // namespace agentbox::persistence
