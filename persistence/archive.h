// Workspace snapshots: tar (pax) compressed with zstd, written and read with
// libarchive, streamed in constant memory.
//
// Writing walks each tree with openat/fstatat (never following a symlink,
// never chdir-ing: the server is threaded), stores entries without host
// ownership (uid/gid 0, no names), symlinks as symlinks, hard links once,
// empty directories, permissions, nanosecond mtimes and sparse files' holes.
// Sockets and devices cannot be archived and are counted in `skipped`.
// The archive goes to a temporary name, is fsynced, renamed into place and
// the directory fsynced; the digest (SHA-256 of the archive bytes) is
// computed while writing.
//
// Reading happens in a forked child that drops to the sandbox's uid (when
// the server is root) and chdirs into a fresh directory, so libarchive's
// SECURE_NODOTDOT | SECURE_SYMLINKS | SECURE_NOABSOLUTEPATHS apply to the
// entries' own relative paths. Entries must also lie under one of the
// expected top-level names and be of a known type. The digest is checked as
// the bytes stream by; any failure removes the directory and throws: the
// caller's live data is never touched (it swaps the result in by rename).
// A thread of the caller reads, hashes and decompresses; the child only
// parses tar and writes (archive_read.cpp says why and how).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace agentbox::persistence {

class ArchiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ArchiveProgress {
  std::uint64_t bytes = 0;  // input bytes archived, or archive bytes read
  std::uint64_t files = 0;
  std::optional<std::uint64_t> total_bytes;  // known when reading
};
using ArchiveProgressFn = std::function<void(const ArchiveProgress&)>;

// A directory archived under a top-level name ("workspace", "home").
struct ArchiveTree {
  std::string name;
  std::filesystem::path dir;
};

// How long one helper run (snapshot, restore, check) may take before it is
// killed and the operation fails (`serve --snapshot-timeout`).
inline constexpr std::chrono::milliseconds kDefaultArchiveTimeout{10 * 60 * 1000};

struct WriteOptions {
  std::chrono::milliseconds timeout = kDefaultArchiveTimeout;
  int level = 3;    // zstd level (tar --zstd uses 3 too)
  int threads = 0;  // zstd worker threads; 0 = one per core, at most 4
  ArchiveProgressFn progress;
  // Incremental snapshots (layers.h). parent: the snapshot whose changes
  // since this archive holds, "" for a complete one; baseline_in: that
  // snapshot's file stamps (a file whose stamp matches is not stored);
  // baseline_out: where this snapshot's stamps go (written as `snapshot_id`).
  std::string snapshot_id;
  std::string parent;
  std::filesystem::path baseline_in;
  std::filesystem::path baseline_out;
};

struct WriteResult;

struct WriteHooks {
  // Runs after the archive is durable under its temporary name and before the
  // rename (the catalog records a pending row here). Throwing aborts.
  std::function<void(const WriteResult&)> before_rename;
};

struct WriteResult {
  std::uint64_t archive_bytes = 0;
  std::uint64_t input_bytes = 0;  // file contents archived (logical sizes)
  std::uint64_t files = 0;        // entries of the snapshot, directories and inherited ones included
  std::uint64_t stored = 0;       // entries this archive holds (files minus what it inherits)
  std::uint64_t skipped = 0;      // sockets and devices
  std::string digest;             // "sha256:<hex>"
};

// Writes the trees to `dest` atomically (temporary file in the same
// directory, fsync, rename, fsync of the directory). Throws ArchiveError;
// a failure leaves no file behind.
WriteResult write_archive(const std::vector<ArchiveTree>& trees, const std::filesystem::path& dest,
                          const WriteOptions& options = {}, const WriteHooks& hooks = {});

struct ExtractOptions {
  std::chrono::milliseconds timeout = kDefaultArchiveTimeout;
  std::vector<std::string> allowed_tops = {"workspace", "home"};
  std::string expected_digest;  // empty: not checked (the CLI's "show" still computes it)
  // Host uid/gid to extract as (applied only when running as root).
  std::optional<std::pair<unsigned, unsigned>> owner;
  std::uint64_t max_bytes = std::uint64_t{1} << 40;  // refuse archives that expand beyond this (kMaxRestoreBytes)
  ArchiveProgressFn progress;
  // Where the restored tree's file stamps go (layers.h), written as the
  // last layer's id; empty: none.
  std::filesystem::path baseline_out;
};

struct ExtractResult {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;  // file contents written
  std::string digest;
  std::string parent;  // the snapshot an incremental archive holds the changes since ("" when complete)
};

// One archive of a snapshot's chain: the file, its expected digest and the
// snapshot id it is (each layer after the first must name the one before as
// its parent).
struct Layer {
  std::filesystem::path archive;
  std::string digest;
  std::string id;
};

// Extracts `archive` into `dest`, which must not exist yet (its parent must).
// On any failure `dest` is removed and ArchiveError says why.
ExtractResult extract_archive(const std::filesystem::path& archive, const std::filesystem::path& dest,
                              const ExtractOptions& options = {});

// Extracts a chain into `dest` (which must not exist): the first, complete
// archive, then each incremental one over it, then removes what the last
// one's list of paths does not name. Every digest and parent link is checked
// while it streams; any failure removes `dest`.
ExtractResult extract_layers(const std::vector<Layer>& layers, const std::filesystem::path& dest,
                             const ExtractOptions& options = {});

// Merge on prune (docs/design.md section 9): `child` with what it inherits
// from `parent` folded in, written atomically to `dest` as a snapshot whose
// parent is `new_parent` ("" when `parent` was complete: the result is too).
// Both digests are checked; a failure leaves no file.
WriteResult merge_archives(const Layer& parent, const Layer& child, const std::string& new_parent,
                           const std::filesystem::path& dest, const WriteOptions& options = {});

// "sha256:<hex>" of a file (recovery and `snapshot show`).
std::string file_digest(const std::filesystem::path& file);

// Reads the archive through without writing anything: entry count, content
// bytes and digest. Throws ArchiveError when it is corrupt.
ExtractResult verify_archive(const std::filesystem::path& archive);

}  // namespace agentbox::persistence
