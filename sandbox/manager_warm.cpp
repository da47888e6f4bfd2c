// The warm cache's bound (docs/design.md section 9, "Warm restore"): stopped
// workspaces parked by idle teardowns (persistence/warm.h) are dropped, least
// recently parked first, once together they take more than the bound. The
// archives stay: a dropped copy only means the next start extracts.
#include "sandbox/manager_impl.h"

#include <spdlog/spdlog.h>

#include <sys/statvfs.h>

namespace agentbox::sandbox {

void ManagerImpl::resolve_warm_budget() {
  if (options_.warm_cache) {
    warm_budget_ = *options_.warm_cache;
  } else {
    struct statvfs fs{};
    warm_budget_ = statvfs(layout_.root.c_str(), &fs) == 0 ? fs.f_bavail * fs.f_frsize / 10 : 0;
  }
  if (warm_budget_ == 0)
    spdlog::info("warm cache: off (every restore after an idle teardown extracts its archive)");
  else
    spdlog::info("warm cache: stopped workspaces kept ready on disk up to {}", size_text(warm_budget_));
}

void ManagerImpl::evict_warm() noexcept {
  try {
    auto rows = catalog_->warm_records();  // oldest first
    std::uint64_t total = 0;
    for (const auto& w : rows) total += w.bytes;
    for (const auto& w : rows) {
      if (total <= warm_budget_) break;
      // Its lock keeps a start of this sandbox (here or in another server)
      // from taking the row while its storage goes.
      persistence::SandboxLock lock;
      if (!persistence::SandboxLock::acquire(layout_.lock(w.sandbox), std::chrono::milliseconds(0), lock)) continue;
      auto taken = catalog_->take_warm(w.sandbox);
      if (!taken) continue;  // a start took it first
      driver_->parking().drop(w.sandbox);
      total -= std::min(total, taken->bytes);
      spdlog::info("warm cache: dropped sandbox {}'s copy of snapshot {} ({}; over the bound of {})", w.sandbox,
                   taken->snapshot, size_text(taken->bytes), size_text(warm_budget_));
    }
  } catch (const std::exception& e) {
    spdlog::error("warm cache: {}", e.what());
  }
}

}  // namespace agentbox::sandbox
