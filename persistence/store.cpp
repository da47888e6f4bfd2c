#include "persistence/store.h"

#include "os/errno_text.h"
#include "os/unique_fd.h"
#include "persistence/layers.h"
#include "persistence/tree_fs.h"

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
    remove_tree(trash);  // a tree the box wrote: by descriptor (tree_fs.h)
  }).detach();
}

fs::path move_aside(const StateLayout& layout, const fs::path& path, const std::string& name) {
  fs::create_directories(layout.lost_and_found());
  std::string when = iso_now();
  for (char& c : when) c = c == ':' ? '-' : c;
  fs::path to = layout.lost_and_found() / (name + "-" + when);
  fs::rename(path, to);  // throws: never fall back to deleting
  return to;
}

void record_conversation(const StateLayout& layout, const std::string& id, const std::string& conversation) {
  fs::path file = layout.conversation_file(id);
  std::error_code ec;
  if (fs::exists(file, ec)) return;
  fs::create_directories(file.parent_path(), ec);
  fs::path tmp = file.string() + ".tmp-" + random_hex(8);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;  // best effort: only a catalog rebuild reads it
  bool ok = write(fd, conversation.data(), conversation.size()) == static_cast<ssize_t>(conversation.size());
  ok = fsync(fd) == 0 && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), file.c_str()) != 0) unlink(tmp.c_str());
}

bool disk_full(const std::exception& e) {
  if (auto c = dynamic_cast<const CatalogError*>(&e)) return c->disk_full();
  if (auto f = dynamic_cast<const fs::filesystem_error*>(&e))
    return f->code() == std::errc::no_space_on_device || f->code().value() == EDQUOT;
  std::string what = e.what();
  return what.find(std::strerror(ENOSPC)) != std::string::npos || what.find(std::strerror(EDQUOT)) != std::string::npos ||
         what.find("database or disk is full") != std::string::npos;
}

namespace {

// The snapshot a baseline file was written for (layers.h: its first line).
std::string baseline_owner(const fs::path& file) {
  os::UniqueFd fd(open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return "";
  char buf[256];
  ssize_t n = read(fd.get(), buf, sizeof buf);
  if (n <= 0) return "";
  std::string head(buf, static_cast<std::size_t>(n));
  const std::string magic(layers::kBaselineMagic);
  std::size_t nl = head.find('\n');
  if (head.rfind(magic, 0) != 0 || nl == std::string::npos) return "";
  return head.substr(magic.size(), nl - magic.size());
}

// Moves a finished baseline into place, or drops it (a stale one would only
// make the next snapshot store more: a stamp matches nothing else).
void install_baseline(const fs::path& temp, const fs::path& to) {
  if (rename(temp.c_str(), to.c_str()) != 0) unlink(temp.c_str());
}

}  // namespace

std::string SnapshotStore::incremental_parent(const std::string& sandbox) {
  if (max_chain_ <= 1) return "";
  std::string id = baseline_owner(baseline(sandbox));
  if (id.empty()) return "";
  auto parent = catalog_.find_snapshot(id);
  if (!parent || !parent->complete || parent->sandbox != sandbox) return "";
  try {
    if (catalog_.chain(*parent).size() >= max_chain_) return "";  // a complete one starts the next chain
  } catch (const CatalogError&) {
    return "";
  }
  return id;
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
  record.parent = incremental_parent(sandbox);
  fs::path stamps = baseline(sandbox).string() + ".tmp-" + random_hex(8);
  WriteOptions options;
  options.progress = progress;
  options.timeout = timeout_;
  options.snapshot_id = record.id;
  options.parent = record.parent;
  options.baseline_in = baseline(sandbox);
  options.baseline_out = stamps;
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
    unlink(stamps.c_str());
    throw;
  }
  catalog_.mark_complete(record.id);
  record.complete = true;
  install_baseline(stamps, baseline(sandbox));
  return record;
}

namespace {

// The staging directory after the extracting child (which ran as the sandbox
// uid) is done: taken back by root first, so no process of that uid changes
// its entries between the checks below and the swap; then each staged tree
// must be a real directory (docs/design.md section 2, "Root and the box's
// paths"). A tree the archive did not hold is made empty.
void check_staged(int staging, const std::vector<ArchiveTree>& trees,
                  std::optional<std::pair<unsigned, unsigned>> owner) {
  bool root = geteuid() == 0;
  if (root && (fchown(staging, 0, 0) != 0 || fchmod(staging, 0700) != 0))
    throw ArchiveError(std::string("cannot take back the restore's staging directory: ") + std::strerror(errno));
  for (const auto& tree : trees) {
    struct stat st;
    if (fstatat(staging, tree.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      throw ArchiveError("the restored " + tree.name + " is not a directory (" +
                         (S_ISLNK(st.st_mode) ? "a symlink" : "another kind of file") +
                         " in the staging directory): the restore is refused and the live " + tree.name +
                         " is unchanged");
    }
    if (errno != ENOENT || mkdirat(staging, tree.name.c_str(), 0755) != 0)
      throw ArchiveError("cannot create the restored " + tree.name + ": " + std::strerror(errno));
    os::UniqueFd fresh(open_dir_beneath(staging, tree.name));
    if (!fresh || (owner && root && fchown(fresh.get(), owner->first, owner->second) != 0))
      throw ArchiveError("cannot hand the restored " + tree.name + " to the sandbox user: " + std::strerror(errno));
  }
}

}  // namespace

ExtractResult SnapshotStore::restore(const SnapshotRecord& snapshot, std::optional<std::pair<unsigned, unsigned>> owner,
                                     const ArchiveProgressFn& progress) {
  fs::path live = layout_.sandbox(snapshot.sandbox);
  fs::create_directories(live);
  std::string staging_name = ".restore-" + random_hex(12);
  fs::path staging = live / staging_name;
  ExtractOptions options;
  options.timeout = timeout_;
  options.owner = owner;
  options.progress = progress;
  fs::create_directories(layout_.snapshots(snapshot.sandbox));
  fs::path stamps = baseline(snapshot.sandbox).string() + ".tmp-" + random_hex(8);
  options.baseline_out = stamps;
  ExtractResult result = extract_layers(layers_of(snapshot), staging, options);
  // Everything is unpacked and verified: now swap each tree in by rename,
  // relative to descriptors of the two directories.
  auto trees = layout_.trees(snapshot.sandbox);
  try {
    os::UniqueFd live_fd(open(live.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    os::UniqueFd staging_fd(live_fd ? open_dir_beneath(live_fd.get(), staging_name) : -1);
    if (!staging_fd) throw ArchiveError("cannot open " + staging.string() + ": " + std::strerror(errno));
    check_staged(staging_fd.get(), trees, owner);
    // (tree, exchanged): what to undo if a later tree cannot be swapped in,
    // or the replaced live trees would go with the staging directory.
    std::vector<std::pair<const ArchiveTree*, bool>> swapped;
    for (const auto& tree : trees) {
      std::string name = tree.dir.filename().string();
      int rc = renameat2(staging_fd.get(), tree.name.c_str(), live_fd.get(), name.c_str(), RENAME_EXCHANGE);
      bool exchanged = rc == 0;
      if (rc != 0 && errno == ENOENT) rc = renameat(staging_fd.get(), tree.name.c_str(), live_fd.get(), name.c_str());
      if (rc != 0) {
        int err = errno;
        for (auto it = swapped.rbegin(); it != swapped.rend(); ++it) {
          std::string back = it->first->dir.filename().string();
          if (it->second) renameat2(staging_fd.get(), it->first->name.c_str(), live_fd.get(), back.c_str(), RENAME_EXCHANGE);
          else renameat(live_fd.get(), back.c_str(), staging_fd.get(), it->first->name.c_str());
        }
        throw ArchiveError("cannot swap in " + tree.dir.string() + ": " + std::strerror(err) +
                           " (the trees swapped before it were put back)");
      }
      swapped.emplace_back(&tree, exchanged);
    }
  } catch (...) {
    unlink(stamps.c_str());
    discard_dir(layout_, staging);
    throw;
  }
  install_baseline(stamps, baseline(snapshot.sandbox));
  discard_dir(layout_, staging);  // now holds the replaced trees
  return result;
}

std::vector<Layer> SnapshotStore::layers_of(const SnapshotRecord& snapshot) {
  std::vector<SnapshotRecord> chain;
  try {
    chain = catalog_.chain(snapshot);
  } catch (const CatalogError& e) {
    throw ArchiveError(e.what());  // a restore that cannot be: SNAPSHOT_CORRUPT, nothing touched
  }
  std::vector<Layer> out;
  for (const auto& s : chain) out.push_back({file(s), s.digest, s.id});
  return out;
}

std::uint64_t SnapshotStore::total_bytes(const SnapshotRecord& snapshot) {
  std::uint64_t total = 0;
  try {
    for (const auto& s : catalog_.chain(snapshot)) total += s.bytes;
  } catch (const CatalogError&) {
    return snapshot.bytes;
  }
  return total;
}

void SnapshotStore::fold(const SnapshotRecord& parent, const SnapshotRecord& child) {
  fs::path to = layout_.snapshots(child.sandbox) / (child.id + "." + random_hex(6) + kMergedSuffix);
  WriteOptions options;
  options.timeout = timeout_;
  WriteResult r = merge_archives({file(parent), parent.digest, parent.id}, {file(child), child.digest, child.id},
                                 parent.parent, to, options);
  SnapshotRecord merged = child;
  merged.path = fs::relative(to, layout_.root).string();
  merged.digest = r.digest;
  merged.bytes = r.archive_bytes;
  merged.files = r.files;
  merged.parent = parent.parent;
  try {
    catalog_.replace_archive(merged);
  } catch (...) {
    std::error_code ec;
    fs::remove(to, ec);
    throw;
  }
  std::error_code ec;
  fs::remove(file(child), ec);  // a fork may still hold it by another link
}

SnapshotRecord SnapshotStore::share(const SnapshotRecord& source, const std::string& sandbox) {
  SnapshotRecord record = source;
  record.id = "snap-" + random_hex(12);
  record.sandbox = sandbox;
  record.label = "";
  record.reason = "fork";
  record.created_at = iso_now();
  fs::path dir = layout_.snapshots(sandbox);
  fs::create_directories(dir);
  fs::path to = dir / (record.id + ".tar.zst");
  record.path = fs::relative(to, layout_.root).string();
  if (link(file(source).c_str(), to.c_str()) != 0) {
    if (errno != EXDEV && errno != EPERM && errno != EMLINK)
      throw ArchiveError(os::errno_text("cannot share " + file(source).string(), errno));
    fs::path temp = to.string() + ".tmp-" + random_hex(8);
    try {
      fs::copy_file(file(source), temp);
      int fd = open(temp.c_str(), O_RDONLY | O_CLOEXEC);
      bool synced = fd >= 0 && fsync(fd) == 0;
      if (fd >= 0) close(fd);
      if (!synced) throw ArchiveError("cannot sync " + temp.string());
      fs::rename(temp, to);
    } catch (...) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw;
    }
  }
  return record;
}

void SnapshotStore::remove(const SnapshotRecord& given) {
  // As it is now: an earlier removal may have merged into it.
  SnapshotRecord snapshot = catalog_.find_snapshot(given.id).value_or(given);
  // Merge on prune: whatever holds only its changes since this one gets
  // what it inherits from it first (a failure keeps this one).
  for (const auto& child : catalog_.children(snapshot.id))
    if (child.complete) fold(snapshot, child);
  catalog_.mark_removing(snapshot.id);
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
