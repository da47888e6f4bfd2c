// One host uid per sandbox (docs/design.md section 8, "One host uid per
// sandbox"): a root server runs each sandbox as a uid and gid of its own from
// the agentbox range, recorded in the catalog, so per-user kernel limits
// (inotify instances, mqueue bytes, pending signals) are not shared. The ids
// go back only with the sandbox's catalog row (destroy without
// keep_snapshots), or with an unclaimed spare once its directories are gone.
//
// Sandboxes of a catalog from before ran as 65534 ("legacy") and keep it
// while they have live files (owned by 65534; nothing is chowned); one whose
// live directories are gone (torn down at idle, or destroyed keeping its
// snapshots) gets a pair of its own at its next start or restore, since a
// restore unpacks as the new owner.
#include "sandbox/manager_impl.h"
#include "sandbox/uid_range.h"

#include <spdlog/spdlog.h>

#include <sys/stat.h>

namespace agentbox::sandbox {

void ManagerImpl::check_uid_range() {
  if (!root_) return;
  ChosenRange chosen = options_.uid_range ? ChosenRange{*options_.uid_range, "--uid-range"} : default_uid_range();
  uid_range_ = chosen.range;
  auto problems = uid_range_problems(uid_range_);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw SandboxError(codes::kSandboxStartFailed, "the sandbox id range " + describe(uid_range_) + " (" +
                                                       chosen.source + ") collides with the host: " + all +
                                                       "; give serve a free --uid-range (agentbox doctor checks it)");
  }
  spdlog::info("sandboxes run as host {} ({}), one pair each", describe(uid_range_), chosen.source);
}

void ManagerImpl::assign_owner(const std::string& id, SandboxDirs& dirs) {
  if (!root_) return;
  bool files = false;
  for (const auto& dir : {dirs.workspace(), dirs.home(), dirs.tmp()}) {
    struct stat st {};
    files |= lstat(dir.c_str(), &st) == 0;
  }
  files |= driver_->parking().parked(id);  // a warm copy's files are the sandbox's too
  persistence::HostIds ids;
  try {
    ids = catalog_->host_ids(id, uid_range_, /*replace_legacy=*/!files);
  } catch (const persistence::CatalogError& e) {
    throw SandboxError(codes::kSandboxStartFailed, e.what());
  }
  dirs.owner = std::make_pair(ids.uid, ids.gid);
}

void ManagerImpl::assign_spare_owner(PreparedSandbox& spare) {
  if (!root_) return;
  // Set first: a spare whose preparation fails half-way is destroyed, and
  // gives the ids back once its directories are gone.
  spare.release_owner = [catalog = catalog_.get(), id = spare.id] {
    try {
      catalog->release_host_ids(id);
    } catch (const std::exception& e) {
      spdlog::warn("sandbox {}: its host ids stay held: {}", id, e.what());
    }
  };
  assign_owner(spare.id, spare.dirs);
}

std::optional<std::pair<unsigned, unsigned>> ManagerImpl::owner(ManagedSandbox& sandbox) {
  assign_owner(sandbox.id_, sandbox.dirs_);
  return sandbox.dirs_.owner;
}

}  // namespace agentbox::sandbox
