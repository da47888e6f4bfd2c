// Incremental snapshots inside the helper (docs/design.md section 9,
// "Incremental snapshots"; docs/persistence.md, "Incremental snapshots").
//
// An archive may hold only what changed since a parent snapshot. Besides its
// `workspace/` and `home/` entries it then carries two small entries under
// the reserved top `.agentbox/`: `parent` (first: the parent's snapshot id,
// empty for a complete archive) and `paths` (last: every path of the
// snapshot, each flagged S when this archive stores it or I when it is
// inherited unchanged from the parent). Archives from before have neither
// and are complete.
//
// What changed is judged against a baseline: the stamp (inode, ctime, mtime,
// size, mode, link count) each regular file had when the parent was written
// or restored, kept host-side in <state>/snapshots/<id>/baseline. The box
// cannot set a ctime, so an equal stamp means the same unmodified inode.
// A file whose ctime falls within kRacyWindow before the stamp was taken
// may still change within the same timestamp tick, so it is recorded as
// never matching (the "racy clean" case git knows). Only regular files with
// one link are ever inherited; directories, symlinks and FIFOs are always
// stored (they carry no data).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unordered_map>
#include <unordered_set>
#include <vector>

struct archive;
struct archive_entry;

namespace agentbox::persistence::layers {

inline constexpr std::string_view kTop = ".agentbox";
inline constexpr std::string_view kParentEntry = ".agentbox/parent";
inline constexpr std::string_view kPathsEntry = ".agentbox/paths";
// The paths entry is read into memory by restore and merge: ~50 bytes a
// path, so about four million entries.
inline constexpr std::uint64_t kMaxPathsBytes = std::uint64_t{256} << 20;
inline constexpr std::chrono::milliseconds kRacyWindow{20};
// A baseline file's first line is this, the snapshot id, '\n' (the server
// reads it to choose the next snapshot's parent: store.cpp).
inline constexpr std::string_view kBaselineMagic = "agentbox-baseline 1 ";

// Reads the .agentbox/ entry `entry` (its header just read from `in`):
// only the two names above, regular files of at most kMaxPathsBytes, the
// parent a snapshot id or empty. Throws ArchiveError otherwise.
std::string read_meta(struct archive* in, struct archive_entry* entry);

inline bool is_meta(std::string_view path) { return path.size() > kTop.size() && path.substr(0, kTop.size() + 1) == ".agentbox/"; }

struct Stamp {
  std::uint64_t ino = 0, size = 0, mode = 0, nlink = 0;
  std::int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator==(const Stamp&) const = default;
};
Stamp stamp_of(const struct stat& st);

// A point in CLOCK_REALTIME, compared with ctimes.
struct Instant {
  std::int64_t s = 0, ns = 0;
  static Instant racy_limit();  // now minus kRacyWindow
  bool at_or_before(std::int64_t sec, std::int64_t nsec) const { return s < sec || (s == sec && ns <= nsec); }
};

class Baseline {
 public:
  // Empty when the file is missing, unreadable or belongs to another snapshot.
  static Baseline load(const std::filesystem::path& file, const std::string& snapshot_id);
  const Stamp* find(const std::string& path) const;
  std::size_t size() const { return stamps_.size(); }

 private:
  std::unordered_map<std::string, Stamp> stamps_;
};

// Writes a baseline: "agentbox-baseline 1 <id>\n", then per file its path,
// a NUL, and the stamp as eight 64-bit little-endian numbers.
class BaselineWriter {
 public:
  BaselineWriter(const std::filesystem::path& file, const std::string& snapshot_id, Instant racy);
  ~BaselineWriter();
  BaselineWriter(const BaselineWriter&) = delete;
  BaselineWriter& operator=(const BaselineWriter&) = delete;
  void add(const std::string& path, const struct stat& st);
  void finish();  // flushed (not fsynced: layers.cpp says why); throws ArchiveError

 private:
  void flush();
  std::filesystem::path file_;
  int fd_ = -1;
  Instant racy_;
  std::string buffer_;
};

// The paths entry: flag byte, path, NUL; for each path in archive order.
class PathList {
 public:
  void add(char flag, const std::string& path);
  const std::string& text() const { return text_; }
  // Throws ArchiveError on a malformed list.
  static std::unordered_map<std::string, char> parse(const std::string& text);

 private:
  std::string text_;
};

// Extraction over an earlier layer (the child, in the destination, as the
// sandbox user). make_dirs_writable: u+rwx on every directory below the
// trees, so a later layer can write into one an earlier layer made read-only
// (this layer's own directory entries set their modes again at close).
// clear_dir_in_the_way: a directory where a non-directory entry goes is
// removed with its contents. prune_to: everything the final list does not
// name is removed. All by descriptor, never following a symlink.
void make_dirs_writable(int root, const std::vector<std::string>& tops);
void clear_dir_in_the_way(int parent_fd, const std::string& name);
void prune_to(int root, const std::vector<std::string>& tops, const std::unordered_map<std::string, char>& paths);

// libarchive sets an existing directory's mode and times as its entry
// passes (later entries then move the mtime) and fixes up at close only the
// directories it created: over an earlier layer the directories' own
// entries are applied again here, after the close, deepest first.
struct DirFix {
  std::string path;
  mode_t mode = 0;
  std::int64_t mtime_s = 0, mtime_ns = 0;
};
void fix_dirs(int root, std::vector<DirFix> fixes);

// The baseline of a restored tree (host side, after the extraction): every
// regular file below root/<top>.
void write_tree_baseline(const std::filesystem::path& root, const std::vector<std::string>& tops,
                         const std::filesystem::path& file, const std::string& snapshot_id);

}  // namespace agentbox::persistence::layers
