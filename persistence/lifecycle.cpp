#include "persistence/lifecycle.h"

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

void reached(const LifecycleHooks& hooks, const char* step) {
  if (hooks.reached) hooks.reached(step);
}

void warn(const LifecycleHooks& hooks, const std::string& line) {
  if (hooks.warn) hooks.warn(line);
}

// A teardown that gives up leaves the live directories the truth.
TeardownResult give_up(Catalog& catalog, const std::string& sandbox, TeardownResult result) {
  result.error = std::current_exception();
  try {
    catalog.set_state(sandbox, SandboxState::Active);
  } catch (const std::exception&) {
    // Snapshotting means the same to recovery and to the next call.
  }
  return result;
}

}  // namespace

TeardownResult tear_down(Catalog& catalog, SnapshotStore& store, const Teardown& t) {
  TeardownResult result;
  try {
    catalog.set_state(t.sandbox, SandboxState::Snapshotting);
  } catch (const std::exception&) {
    return give_up(catalog, t.sandbox, std::move(result));  // nothing stopped yet: the box keeps running
  }
  reached(t.hooks, "snapshotting");
  // Processes first: nothing writes to the workspace while it is archived.
  if (t.stop) t.stop();
  result.stopped = true;
  reached(t.hooks, "box stopped");
  try {
    result.snapshot = t.take ? t.take() : store.take(t.sandbox, "", "idle");
    reached(t.hooks, "snapshot taken");
    catalog.set_state(t.sandbox, SandboxState::Stopped);
  } catch (const std::exception&) {
    return give_up(catalog, t.sandbox, std::move(result));
  }
  reached(t.hooks, "stopped");
  // Only now is the snapshot the truth: the live directories may go, or
  // stay as its warm copy. A row is written only once they are parked.
  if (t.park) {
    try {
      WarmRecord warm = t.park->park(t.sandbox, result.snapshot);
      reached(t.hooks, "parked");
      catalog.set_warm(warm);
      result.warm = std::move(warm);
      reached(t.hooks, "warm recorded");
    } catch (const std::exception& e) {
      warn(t.hooks, std::string("not kept warm: ") + e.what());
      t.park->drop(t.sandbox);
    }
  }
  if (!result.warm && (!t.discard_live || !t.discard_live()))
    for (const auto& dir : t.live_dirs) discard_dir(store.layout(), dir);
  reached(t.hooks, "live discarded");
  try {
    result.pruned = store.prune(t.sandbox, t.keep_snapshots);
  } catch (const std::exception& e) {
    warn(t.hooks, std::string("retention: ") + e.what());
  }
  reached(t.hooks, "pruned");
  return result;
}

std::optional<SnapshotRecord> resume_target(Catalog& catalog, const SandboxRecord& record) {
  return record.restore_snapshot.empty() ? catalog.latest_snapshot(record.id)
                                         : catalog.find_snapshot(record.restore_snapshot);
}

RestoreResult restore(Catalog& catalog, SnapshotStore& store, const Restore& r) {
  const SnapshotRecord& snapshot = *r.snapshot;
  RestoreResult result;
  try {
    catalog.set_state(snapshot.sandbox, SandboxState::Restoring, snapshot.id);
    reached(r.hooks, "restoring");
    // The row goes before its storage is touched: from here on a crash
    // leaves storage no row names (recovery drops it), never a row that
    // names storage a box ran on.
    if (auto warm = r.warm ? catalog.take_warm(snapshot.sandbox) : std::nullopt) {
      reached(r.hooks, "warm taken");
      result.cache_miss = warm->snapshot == snapshot.id ? r.warm->unpark(*warm)
                                                        : "its cached copy holds snapshot " + warm->snapshot;
      if (result.cache_miss.empty()) {
        result.warm = true;
        result.extract.files = snapshot.files;
        result.extract.digest = snapshot.digest;
        reached(r.hooks, "swapped");
        return result;
      }
      r.warm->drop(snapshot.sandbox);
    } else if (r.warm && r.warm->parked(snapshot.sandbox)) {
      r.warm->drop(snapshot.sandbox);  // no row names it
    }
    auto owner = r.owner ? r.owner() : std::nullopt;
    result.extract = r.extract ? r.extract(owner, r.progress) : store.restore(snapshot, owner, r.progress);
  } catch (const std::exception&) {
    // The store touched nothing live (store.h), so the old truth stands.
    try {
      if (r.before)
        catalog.put_back_state(*r.before);
      else
        catalog.set_state(snapshot.sandbox, r.on_failure, r.on_failure == SandboxState::Stopped ? snapshot.id : "");
    } catch (const std::exception& again) {
      warn(r.hooks, std::string("after a failed restore: ") + again.what());
    }
    throw;
  }
  reached(r.hooks, "swapped");
  return result;
}

void activate(Catalog& catalog, const std::string& sandbox, SandboxState before, const LifecycleHooks& hooks) {
  if (before == SandboxState::Active) return;
  try {
    catalog.set_state(sandbox, SandboxState::Active);
  } catch (const std::exception& e) {
    // After a restore the catalog still says Restoring: a crash would
    // discard what the box writes now (docs/design.md section 8).
    if (before == SandboxState::Stopped || before == SandboxState::Restoring) throw;
    warn(hooks, e.what());  // the live directories are the truth either way
    return;
  }
  reached(hooks, "active");
}

void destroy(Catalog& catalog, SnapshotStore& store, const std::string& sandbox, bool keep_snapshots,
             const DiscardLive& discard_live, const LifecycleHooks& hooks) {
  catalog.begin_destroy(sandbox, keep_snapshots);
  reached(hooks, "tombstone");
  finish_destroy(catalog, store, sandbox, discard_live, hooks);
}

void finish_destroy(Catalog& catalog, SnapshotStore& store, const std::string& sandbox,
                    const DiscardLive& discard_live, const LifecycleHooks& hooks) {
  auto record = catalog.find_sandbox(sandbox);
  if (!record || (record->state != SandboxState::Destroying && record->state != SandboxState::Clearing)) return;
  const StateLayout& layout = store.layout();
  // Trees first, then the directory: each rename is atomic, and what is
  // left after a crash is named by the tombstone or is trash.
  if (!discard_live || !discard_live(sandbox))
    for (const auto& tree : layout.trees(sandbox)) discard_dir(layout, tree.dir);
  discard_dir(layout, layout.sandbox(sandbox));
  reached(hooks, "directories discarded");
  if (record->state == SandboxState::Clearing) {
    catalog.set_state(sandbox, SandboxState::None);
    return;
  }
  auto own = catalog.snapshots(sandbox, true);  // newest first
  // A fork's snapshot may hold only its changes since one of these: it gets
  // what it inherits first (merge on prune; a failure stops the destroy
  // here, and the tombstone finishes it later).
  for (const auto& s : own)
    for (const auto& child : catalog.children(s.id))
      if (child.sandbox != sandbox && child.complete) store.fold(s, child);
  for (const auto& s : own) {
    std::error_code ec;
    fs::remove(store.file(s), ec);
  }
  std::error_code ec;
  fs::remove_all(layout.snapshots(sandbox), ec);
  reached(hooks, "archives removed");
  catalog.drop_destroyed(sandbox);
}

}  // namespace agentbox::persistence
