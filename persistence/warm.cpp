#include "persistence/warm.h"

#include "persistence/tree_fs.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

// inode:mtime:ctime of a directory that is not a symlink; empty otherwise.
std::string dir_stamp(const fs::path& path) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  auto ns = [](const timespec& t) { return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec); };
  return std::to_string(st.st_ino) + ":" + ns(st.st_mtim) + ":" + ns(st.st_ctim);
}

}  // namespace

std::string ParkedDirs::stamp(const std::string& sandbox) const {
  fs::path warm = dir(sandbox);
  std::string out = dir_stamp(warm);
  if (out.empty()) return "";
  out = "dirs " + out;
  for (const auto& tree : layout_.trees(sandbox)) {
    std::string s = dir_stamp(warm / tree.name);
    out += " " + tree.name + "=" + (s.empty() ? "-" : s);
  }
  return out;
}

WarmRecord ParkedDirs::park(const std::string& sandbox, const SnapshotRecord& snapshot) {
  fs::path warm = dir(sandbox);
  drop(sandbox);  // a stale one (never expected: no row names it)
  if (mkdir(warm.c_str(), 0700) != 0)
    throw std::runtime_error("cannot make " + warm.string() + ": " + std::strerror(errno));
  for (const auto& tree : layout_.trees(sandbox)) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(tree.dir, ec))) continue;  // a snapshot of no such tree restores none
    if (rename(tree.dir.c_str(), (warm / tree.name).c_str()) != 0)
      throw std::runtime_error("cannot park " + tree.dir.string() + ": " + std::strerror(errno));
  }
  discard_dir(layout_, layout_.sandbox(sandbox) / "tmp");  // no snapshot holds /tmp
  WarmRecord record;
  record.sandbox = sandbox;
  record.snapshot = snapshot.id;
  record.bytes = tree_disk_bytes(warm);
  record.stamp = stamp(sandbox);
  return record;
}

std::string ParkedDirs::unpark(const WarmRecord& warm) {
  fs::path parked = dir(warm.sandbox);
  std::string now = stamp(warm.sandbox);
  if (now.empty()) return "its cached copy is gone";
  if (now != warm.stamp) return "its cached copy changed after it was cached";
  for (const auto& tree : layout_.trees(warm.sandbox)) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(tree.dir, ec)))
      return "live directories are in the way of its cached copy (" + tree.dir.string() + ")";
    fs::path from = parked / tree.name;
    if (!fs::exists(fs::symlink_status(from, ec))) continue;
    if (rename(from.c_str(), tree.dir.c_str()) != 0)
      return "cannot move its cached " + tree.name + " back: " + std::strerror(errno);
  }
  if (rmdir(parked.c_str()) != 0) return "its cached copy holds more than it should: " + std::string(std::strerror(errno));
  return "";
}

bool ParkedDirs::parked(const std::string& sandbox) const {
  std::error_code ec;
  return fs::exists(fs::symlink_status(dir(sandbox), ec));
}

void ParkedDirs::drop(const std::string& sandbox) noexcept {
  try {
    discard_dir(layout_, dir(sandbox));  // renamed to trash now, deleted in the background
  } catch (const std::exception&) {
    // Left for recovery: no row names it.
  }
}

}  // namespace agentbox::persistence
