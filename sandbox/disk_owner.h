// Who owns a sandbox's files on its disk (docs/design.md section 9, "Fork").
// As root every sandbox runs as host ids of its own (manager_uids.cpp), and
// its files are stored under those ids. A fork made by cloning its source's
// disk (disk_pool.h) holds files stored under the source's ids: rather than
// re-owning every file (a walk that grows with the workspace), the fork's
// box sees its workspace, home and tmp through an idmapped mount (staging.h)
// that shows the on-disk ids as its own, and what it creates is stored under
// the on-disk ids too. Which ids are on a disk is written once, before the
// first clone of it, in a root-owned file at the root of its filesystem
// (<sandbox>/.disk-owner, out of the box's reach), so the clones carry it; a
// disk without it holds its sandbox's own ids (a fresh one, or one an
// archive was unpacked into).
#pragma once

#include "os/unique_fd.h"

#include <filesystem>
#include <optional>
#include <utility>

namespace agentbox::sandbox {

using HostIds = std::pair<unsigned, unsigned>;  // uid, gid

// The ids the marker names; none when there is none (or it is unreadable).
std::optional<HostIds> read_disk_owner(const std::filesystem::path& sandbox_root);
// Writes the marker (root's, 0600, synced). Throws SandboxError.
void write_disk_owner(const std::filesystem::path& sandbox_root, HostIds ids);
// A user namespace whose only mapping shows on-disk `disk` ids as `box`
// ids, for MOUNT_ATTR_IDMAP (kept alive by the descriptor). Root only.
// Throws SandboxError(SANDBOX_START_FAILED).
os::UniqueFd idmap_userns(HostIds disk, HostIds box);

}  // namespace agentbox::sandbox
