#include "persistence/recovery.h"

#include "persistence/lifecycle.h"
#include "persistence/sandbox_lock.h"
#include "persistence/tree_fs.h"

#include <fstream>
#include <set>
#include <sys/stat.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

bool is_temp_archive(const std::string& name) { return name.find(".tar.zst.tmp-") != std::string::npos; }

class Recovery {
 public:
  Recovery(const StateLayout& layout, Catalog& catalog, bool rebuild, const RecoveryHooks& hooks)
      : layout_(layout),
        catalog_(catalog),
        store_(layout, catalog),
        rebuild_(rebuild),
        hooks_(hooks),
        dirs_(layout),
        parked_(hooks.parked ? *hooks.parked : static_cast<ParkedStorage&>(dirs_)) {}

  RecoveryReport run() {
    guarded("the unknown directories", [&] { leftovers(); });
    for (const auto& sandbox : catalog_.sandboxes()) {
      SandboxLock lock;
      if (!SandboxLock::acquire(layout_.lock(sandbox.id), std::chrono::milliseconds(0), lock)) {
        report_.skipped.push_back(sandbox.id);
        continue;
      }
      // One sandbox's repair failing (a full disk) must not stop the server
      // or the others': it is logged and retried at the next start.
      guarded("sandbox " + sandbox.id, [&] {
        if (sandbox.state == SandboxState::Destroying || sandbox.state == SandboxState::Clearing) {
          parked_.drop(sandbox.id);  // a warm copy goes with it
          finish_destroy(catalog_, store_, sandbox.id, hooks_.discard_live);
          act("sandbox " + sandbox.id + ": a destroy was cut short; finished");
          return;
        }
        snapshots(sandbox.id);
        if (warm(sandbox)) return;
        live(sandbox);
      });
    }
    return report_;
  }

 private:
  void act(std::string line) { report_.actions.push_back(std::move(line)); }
  bool discard_live(const std::string& id) { return hooks_.discard_live && hooks_.discard_live(id); }

  template <typename Fn>
  void guarded(const std::string& what, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      report_.failed.push_back(what + ": " + e.what());
    }
  }

  void snapshots(const std::string& id) {
    fs::path dir = layout_.snapshots(id);
    std::set<std::string> recorded;
    for (const auto& s : catalog_.snapshots(id, true)) {
      recorded.insert(fs::path(s.path).filename().string());
      bool present = fs::exists(store_.file(s));
      if (s.removing) {
        std::error_code ec;
        fs::remove(store_.file(s), ec);
        catalog_.remove_snapshot(s.id);
        act("snapshot " + s.id + " of " + id + ": its removal was cut short; finished");
      } else if (s.complete && !present) {
        // Dropping the row would let the next call start on an empty or
        // older workspace without a word: keep it, so restoring it reports
        // SNAPSHOT_CORRUPT naming the snapshot (docs/design.md section 4).
        act("snapshot " + s.id + " of " + id + ": its file " + store_.file(s).string() +
            " is gone; kept in the catalog, restoring it reports SNAPSHOT_CORRUPT");
      } else if (!s.complete && !present) {
        catalog_.remove_snapshot(s.id);
        act("snapshot " + s.id + " of " + id + ": interrupted before it was complete; dropped");
      } else if (!s.complete) {
        if (file_digest(store_.file(s)) == s.digest) {
          catalog_.mark_complete(s.id);
          act("snapshot " + s.id + " of " + id + ": written but not marked complete; verified and completed");
        } else {
          set_aside(store_.file(s));
          catalog_.remove_snapshot(s.id);
          act("snapshot " + s.id + " of " + id + ": does not match its digest; set aside as .corrupt");
        }
      }
    }
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::string name = entry.path().filename().string();
      if (is_temp_archive(name)) {
        fs::remove(entry.path(), ec);
        act("removed half-written archive " + entry.path().string());
      } else if (name.rfind("baseline.tmp-", 0) == 0) {
        fs::remove(entry.path(), ec);  // stamps of a snapshot or restore that did not finish
      } else if (name.ends_with(kMergedSuffix) && !recorded.count(name)) {
        // A merge on prune that never reached the catalog: the chain it
        // would have replaced is intact.
        fs::remove(entry.path(), ec);
        act("removed uncommitted merge " + entry.path().string());
      } else if (name.size() > 8 && name.ends_with(".tar.zst") && !recorded.count(name)) {
        if (catalog_.find_snapshot(name.substr(0, name.size() - 8))) {
          // The file a merge on prune replaced (its row names the merged
          // archive now): the crash came before its removal.
          fs::remove(entry.path(), ec);
          act("removed " + entry.path().string() + ", replaced by a merge");
        } else {
          adopt(id, entry.path());
        }
      }
    }
  }

  void adopt(const std::string& id, const fs::path& file) {
    try {
      ExtractResult r = verify_archive(file);
      SnapshotRecord s;
      s.id = file.filename().string().substr(0, file.filename().string().size() - 8);
      s.sandbox = id;
      // The file's time, so that "latest" still means the newest archive.
      struct stat st{};
      s.created_at = ::stat(file.c_str(), &st) == 0 ? iso_time(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) : iso_now();
      s.bytes = fs::file_size(file);
      s.files = r.files;
      s.digest = r.digest;
      s.path = fs::relative(file, layout_.root).string();
      s.reason = "recovered";
      s.parent = r.parent;  // a chain it belongs to restores it; without its parent it says so
      s.complete = true;
      catalog_.add_snapshot(s);
      act("adopted archive " + file.string() + " as snapshot " + s.id);
    } catch (const std::exception& e) {
      set_aside(file);
      act("archive " + file.string() + " does not read (" + e.what() + "); set aside as .corrupt");
    }
  }

  void set_aside(const fs::path& file) {
    std::error_code ec;
    fs::rename(file, fs::path(file.string() + ".corrupt"), ec);
  }

  // The warm copy (warm.h): kept, dropped, or adopted when the archive it
  // copies is gone. True when it was adopted (the sandbox is done).
  bool warm(const SandboxRecord& sandbox) {
    auto row = catalog_.find_warm(sandbox.id);
    bool parked = parked_.parked(sandbox.id);
    if (!row && !parked) return false;
    std::optional<SnapshotRecord> target;
    if (sandbox.state == SandboxState::Stopped) target = resume_target(catalog_, sandbox);
    std::error_code ec;
    bool keep = row && parked && target && target->id == row->snapshot;
    if (keep && !fs::exists(store_.file(*target), ec) && !fs::exists(layout_.sandbox(sandbox.id) / "workspace", ec)) {
      catalog_.take_warm(sandbox.id);
      std::string why = parked_.unpark(*row);
      if (why.empty()) {
        catalog_.set_state(sandbox.id, SandboxState::Active);
        act("sandbox " + sandbox.id + ": its snapshot " + target->id +
            " is gone; its warm copy is moved back and adopted");
        return true;
      }
      act("sandbox " + sandbox.id + ": its snapshot " + target->id + " is gone and its warm copy cannot be used (" +
          why + "); kept aside at " + move_aside(layout_, layout_.sandbox(sandbox.id), sandbox.id + "-warm").string());
      return false;
    }
    if (keep) return false;
    if (row) catalog_.take_warm(sandbox.id);
    if (parked) {
      parked_.drop(sandbox.id);
      act("sandbox " + sandbox.id + ": dropped a warm copy that " +
          (row ? "does not hold what the sandbox restores next" : std::string("no catalog row names")));
    }
    return false;
  }

  void live(const SandboxRecord& sandbox) {
    fs::path dir = layout_.sandbox(sandbox.id);
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::string name = entry.path().filename().string();
        if (name.rfind(".trash-", 0) == 0) {  // in the sandbox's own filesystem (discard_dir)
          fs::remove_all(entry.path(), ec);
        } else if (name.rfind(".restore-", 0) == 0) {
          // Renamed away first: a helper killed with its server may still be
          // writing into it for a moment, and remove_all would lose that race.
          discard_dir(layout_, entry.path());
          act("removed unfinished restore " + entry.path().string());
        }
      }
    }
    bool has_live = fs::exists(dir / "workspace", ec);
    auto truth = sandbox.restore_snapshot.empty() ? catalog_.latest_snapshot(sandbox.id)
                                                  : catalog_.find_snapshot(sandbox.restore_snapshot);
    bool has_snapshot = truth.has_value();
    bool stopped = sandbox.state == SandboxState::Stopped || sandbox.state == SandboxState::Restoring;
    if (stopped && has_snapshot && has_live && !fs::exists(store_.file(*truth), ec)) {
      if (sandbox.state == SandboxState::Stopped) {
        // A teardown stops the agent before it archives, so what it left
        // holds what the lost snapshot held: the best copy there is.
        catalog_.set_state(sandbox.id, SandboxState::Active);
        act("sandbox " + sandbox.id + ": its snapshot " + truth->id +
            " is gone; the live directories a teardown left are kept and adopted");
      } else {
        for (const auto& tree : layout_.trees(sandbox.id))
          if (fs::exists(tree.dir, ec))
            act("sandbox " + sandbox.id + ": a restore of the missing snapshot " + truth->id +
                " was cut short; its half-swapped " + tree.name + " is kept at " +
                move_aside(layout_, tree.dir, sandbox.id + "-" + tree.name).string());
        catalog_.set_state(sandbox.id, SandboxState::Stopped, sandbox.restore_snapshot);
      }
    } else if (sandbox.state == SandboxState::Snapshotting || sandbox.state == SandboxState::Starting) {
      catalog_.set_state(sandbox.id, SandboxState::Active);
      act("sandbox " + sandbox.id + ": was " + std::string(state_name(sandbox.state)) +
          "; its live directories are kept and adopted");
    } else if (stopped && has_snapshot) {
      if (!discard_live(sandbox.id)) {
        for (const auto& tree : layout_.trees(sandbox.id)) {
          if (fs::exists(tree.dir, ec)) discard_dir(layout_, tree.dir);
        }
      }
      if (sandbox.state == SandboxState::Restoring) {
        catalog_.set_state(sandbox.id, SandboxState::Stopped, sandbox.restore_snapshot);
        act("sandbox " + sandbox.id + ": a restore was cut short; the next call restores " +
            (sandbox.restore_snapshot.empty() ? "the latest snapshot" : sandbox.restore_snapshot));
      } else if (has_live) {
        act("sandbox " + sandbox.id + ": stopped with leftover live directories; removed (its snapshot holds them)");
      }
    } else if (sandbox.state == SandboxState::Active && !has_live && has_snapshot) {
      catalog_.set_state(sandbox.id, SandboxState::Stopped);
      act("sandbox " + sandbox.id + ": active without live directories; its latest snapshot will be restored");
    } else if (stopped && has_live) {
      catalog_.set_state(sandbox.id, SandboxState::Active);
      act("sandbox " + sandbox.id + ": marked " + std::string(state_name(sandbox.state)) +
          " but has no snapshot; live directories kept");
    }
    if (sandbox.owner_pid != 0) catalog_.set_owner(sandbox.id, 0);
  }

  // Whether the trees a snapshot would hold (workspace, home) hold any file;
  // etc and tmp are the server's own. A spare a crash left holds none.
  bool holds_files(const std::string& id) {
    for (const auto& tree : layout_.trees(id)) {
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(tree.dir, ec))) continue;
      if (!fs::is_directory(fs::symlink_status(tree.dir, ec))) return true;
      for (auto it = fs::recursive_directory_iterator(tree.dir, ec); it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (ec) return true;  // unreadable: assume it holds something
        if (!it->is_directory(ec)) return true;
      }
      if (ec) return true;
    }
    return false;
  }

  std::string mapped_conversation(const std::string& id) {
    std::ifstream in(layout_.conversation_file(id), std::ios::binary);
    std::string conversation((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (conversation.empty() || catalog_.find_by_conversation(conversation)) return "";
    return conversation;
  }

  // Sandbox directories and archive directories the catalog does not know.
  void leftovers() {
    std::error_code ec;
    std::set<std::string> ids;
    for (const auto& entry : fs::directory_iterator(layout_.sandboxes(), ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind(".trash-", 0) == 0) {
        remove_tree(entry.path());  // box-written: by descriptor (tree_fs.h)
        act("removed trash " + entry.path().string());
      } else if (name[0] != '.' && entry.is_directory(ec)) {
        ids.insert(name);
      }
    }
    if (rebuild_)
      for (const auto& entry : fs::directory_iterator(layout_.root / "snapshots", ec))
        if (entry.is_directory(ec)) ids.insert(entry.path().filename().string());
    for (const auto& id : ids) {
      if (catalog_.find_sandbox(id)) continue;
      SandboxLock lock;
      if (!SandboxLock::acquire(layout_.lock(id), std::chrono::milliseconds(0), lock)) continue;
      // Rows are written before directories, so no server is creating it.
      if (catalog_.find_sandbox(id)) continue;
      guarded("directory of sandbox " + id, [&] { unknown(id); });
    }
  }

  void unknown(const std::string& id) {
    std::error_code ec;
    fs::path dir = layout_.sandbox(id);
    bool live = fs::exists(dir / "workspace", ec), snaps = false;
    for (const auto& e : fs::directory_iterator(layout_.snapshots(id), ec))
      snaps |= e.path().extension() == ".zst" && !is_temp_archive(e.path().filename().string());
    std::string conversation = mapped_conversation(id);
    if ((rebuild_ && (live || snaps)) || (!conversation.empty() && live)) {
      catalog_.adopt_sandbox(id, conversation, live ? SandboxState::Active : SandboxState::Stopped);
      act("adopted sandbox " + id + " found on disk (" + (live ? "live directories" : "snapshots") + "), " +
          (conversation.empty() ? "serving no conversation (its conversation is not recorded)"
                                : "conversation '" + conversation + "'"));
    } else if (fs::exists(dir, ec) && holds_files(id)) {
      act("directory " + dir.string() + " of a sandbox the catalog does not know holds files: kept at " +
          move_aside(layout_, dir, id).string());
    } else if (fs::exists(dir, ec)) {
      discard_live(id);  // its own filesystem, if it has one (sandbox/disk.h)
      remove_tree(dir);  // an empty spare a crash left (box-written: by descriptor, tree_fs.h)
      act("removed empty directory " + dir.string() + " of a sandbox the catalog does not know");
    }
  }

  const StateLayout& layout_;
  Catalog& catalog_;
  SnapshotStore store_;
  RecoveryReport report_;
  bool rebuild_;
  const RecoveryHooks& hooks_;
  ParkedDirs dirs_;
  ParkedStorage& parked_;
};

}  // namespace

RecoveryReport recover(const StateLayout& layout, Catalog& catalog, bool rebuild, const RecoveryHooks& hooks) {
  return Recovery(layout, catalog, rebuild, hooks).run();
}

std::string set_aside_damaged_catalog(const StateLayout& layout) {
  std::string why = Catalog::damage(layout.catalog());
  if (why.empty()) return "";
  std::string when = iso_now();
  for (char& c : when) c = c == ':' ? '-' : c;
  fs::path kept = layout.catalog().string() + ".damaged-" + when;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ec;
    fs::path from = layout.catalog().string() + suffix;
    if (fs::exists(from, ec)) fs::rename(from, kept.string() + suffix);  // throws: never open over it
  }
  return "the catalog " + layout.catalog().string() + " is damaged (" + why + "): kept as " + kept.string() +
         ", a new one is rebuilt from the sandboxes and snapshots on disk";
}

std::vector<std::string> kept_aside(const StateLayout& layout) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(layout.root, ec))
    if (e.path().filename().string().rfind("catalog.db.damaged-", 0) == 0 &&
        !e.path().string().ends_with("-wal") && !e.path().string().ends_with("-shm"))
      out.push_back("damaged catalog kept: " + e.path().string());
  for (const auto& e : fs::directory_iterator(layout.lost_and_found(), ec))
    out.push_back("workspace kept aside by recovery: " + e.path().string());
  return out;
}

}  // namespace agentbox::persistence
