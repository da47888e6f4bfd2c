// Making a sandbox's directories as the server: <root>/{workspace,home,tmp}
// for the sandbox user and the generated <root>/etc. Everything below <root>
// is done through descriptors (mkdirat, openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS, fchown/fchmod on the opened directory, etc files
// written beside and renamed in), so an entry a sandbox-uid process swapped
// for a symlink is refused, never followed (docs/design.md section 2, "Root
// and the box's paths").
#pragma once

#include "sandbox/bwrap_plan.h"

#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace agentbox::sandbox {

struct DirsSetup {
  mode_t root_mode = 0700;
  // The sandbox user's uid and gid (a root server): it gets workspace, home
  // and tmp; <root> and etc are then taken back by root.
  std::optional<std::pair<unsigned, unsigned>> owner;
  std::vector<std::pair<std::string, std::string>> etc_files;  // name, content
};

// A directory of the state directory (sandboxes, snapshots, locks) with
// exactly `mode`, made if absent. Throws SandboxError(SANDBOX_START_FAILED).
void make_state_subdir(const std::filesystem::path& dir, mode_t mode);

// Throws SandboxError(SANDBOX_START_FAILED) naming the entry when one is a
// symlink or not a directory, or a call fails.
void prepare_sandbox_dirs(const SandboxDirs& dirs, const DirsSetup& setup);

}  // namespace agentbox::sandbox
