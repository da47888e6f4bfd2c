// Root's operations on trees a less trusted uid can write (a sandbox's
// workspace, home and tmp, a restore's staging directory, trash being
// deleted): by descriptor, never following a symlink the box planted and
// never leaving the tree's filesystem (docs/design.md section 2, "Root and
// the box's paths"). The path given is trusted up to its last component (it
// lies in the server's own state directory); everything below is not.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace agentbox::persistence {

// Deletes `path` and everything under it. A symlink anywhere is unlinked,
// never followed, also one swapped in for a directory mid-walk (directories
// are opened O_NOFOLLOW relative to their parent's descriptor); a directory
// on another filesystem (a mount point) is left. One descriptor per level:
// a subtree deeper than kMaxTreeDepth is moved up to `path` and removed from
// there (up to 64 such passes). Returns the first error (none when `path` is
// absent); then what could not be removed is left.
inline constexpr int kMaxTreeDepth = 256;
std::error_code remove_tree(const std::filesystem::path& path);
// The same for `name` in the directory `parent` (a descriptor the caller keeps).
std::error_code remove_tree_at(int parent, const std::string& name);

// What the files under `dir` take on disk: st_blocks * 512 of every entry
// found with fstatat(AT_SYMLINK_NOFOLLOW) below `dir` (hard links counted
// once), on `dir`'s filesystem only, at most kMaxTreeDepth levels down.
// Allocated blocks, not st_size: a sparse file costs what it holds, and the
// figure is what a quota or statvfs of a workspace filesystem reports.
std::uint64_t tree_disk_bytes(const std::filesystem::path& dir);

// Opens `name` under the directory `dirfd` as a directory with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or openat(O_NOFOLLOW |
// O_DIRECTORY) where openat2 is missing (ENOSYS: kernels before 5.6, or a
// seccomp filter). -1 with errno (ELOOP, ENOTDIR, ...) when it is a symlink
// or not a directory.
int open_dir_beneath(int dirfd, const std::string& name);

}  // namespace agentbox::persistence
