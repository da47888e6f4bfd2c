#include "persistence/store.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

std::string random_hex(std::size_t digits) {
  // random_device each time: a forked child must not repeat its parent's ids.
  std::random_device rd;
  std::string out;
  while (out.size() < digits) {
    for (unsigned v = rd(), i = 0; i < 8 && out.size() < digits; ++i, v >>= 4) out += "0123456789abcdef"[v & 15];
  }
  return out;
}

std::vector<ArchiveTree> StateLayout::trees(const std::string& id) const {
  return {{"workspace", sandbox(id) / "workspace"}, {"home", sandbox(id) / "home"}};
}

void discard_dir(const StateLayout& layout, const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;
  fs::path trash = layout.sandboxes() / (".trash-" + random_hex(12));
  if (rename(path.c_str(), trash.c_str()) != 0) {
    // EXDEV: path is on a sandbox's own filesystem (sandbox/disk.h); its
    // trash stays on it, in the sandbox directory, where recovery looks too.
    fs::path local = path.parent_path() / trash.filename();
    trash = errno == EXDEV && rename(path.c_str(), local.c_str()) == 0 ? local : path;
  }
  // On ext4, unpacking many files right after deleting many is slow (the
  // inode allocator skips freed inodes): delete in the background.
  std::thread([trash] {
    std::error_code ignored;
    fs::remove_all(trash, ignored);
  }).detach();
}

SnapshotRecord SnapshotStore::take(const std::string& sandbox, const std::string& label, const std::string& reason,
                                   const ArchiveProgressFn& progress) {
  SnapshotRecord record;
  record.id = "snap-" + random_hex(12);
  record.sandbox = sandbox;
  record.label = label;
  record.reason = reason;
  fs::path dir = layout_.snapshots(sandbox);
  fs::create_directories(dir);
  fs::path file = dir / (record.id + ".tar.zst");
  record.path = fs::relative(file, layout_.root).string();
  WriteOptions options;
  options.progress = progress;
  WriteHooks hooks;
  hooks.before_rename = [&](const WriteResult& r) {
    record.created_at = iso_now();
    record.bytes = r.archive_bytes;
    record.files = r.files;
    record.digest = r.digest;
    record.complete = false;
    catalog_.add_snapshot(record);
  };
  try {
    write_archive(layout_.trees(sandbox), file, options, hooks);
  } catch (...) {
    // The pending row (if it was written) names a file that never got its name.
    if (!record.created_at.empty()) catalog_.remove_snapshot(record.id);
    throw;
  }
  catalog_.mark_complete(record.id);
  record.complete = true;
  return record;
}

ExtractResult SnapshotStore::restore(const SnapshotRecord& snapshot, std::optional<std::pair<unsigned, unsigned>> owner,
                                     const ArchiveProgressFn& progress) {
  fs::path live = layout_.sandbox(snapshot.sandbox);
  fs::create_directories(live);
  fs::path staging = live / (".restore-" + random_hex(12));
  ExtractOptions options;
  options.expected_digest = snapshot.digest;
  options.owner = owner;
  options.progress = progress;
  ExtractResult result = extract_archive(file(snapshot), staging, options);
  // Everything is unpacked and verified: now swap each tree in by rename.
  for (const auto& tree : layout_.trees(snapshot.sandbox)) {
    fs::path fresh = staging / tree.name;
    if (!fs::exists(fresh)) {
      fs::create_directory(fresh);
      if (owner && geteuid() == 0 && chown(fresh.c_str(), owner->first, owner->second) != 0)
        throw ArchiveError("chown " + fresh.string() + ": " + std::strerror(errno));
    }
    int rc = renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, tree.dir.c_str(), RENAME_EXCHANGE);
    if (rc != 0 && errno == ENOENT) rc = rename(fresh.c_str(), tree.dir.c_str());
    if (rc != 0)
      throw ArchiveError("cannot swap in " + tree.dir.string() + ": " + std::strerror(errno));
  }
  discard_dir(layout_, staging);  // now holds the replaced trees
  return result;
}

void SnapshotStore::remove(const SnapshotRecord& snapshot) {
  std::error_code ec;
  fs::remove(file(snapshot), ec);
  catalog_.remove_snapshot(snapshot.id);
}

std::vector<SnapshotRecord> SnapshotStore::prune(const std::string& sandbox, std::size_t keep) {
  std::vector<SnapshotRecord> removed;
  std::size_t unlabelled = 0;
  for (const auto& s : catalog_.snapshots(sandbox)) {
    if (!s.label.empty()) continue;
    if (++unlabelled <= keep) continue;
    remove(s);
    removed.push_back(s);
  }
  return removed;
}

}  // namespace agentbox::persistence
