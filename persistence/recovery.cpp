#include "persistence/recovery.h"

#include "persistence/sandbox_lock.h"

#include <set>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

bool is_temp_archive(const std::string& name) { return name.find(".tar.zst.tmp-") != std::string::npos; }

class Recovery {
 public:
  Recovery(const StateLayout& layout, Catalog& catalog, const RecoveryHooks& hooks)
      : layout_(layout), catalog_(catalog), store_(layout, catalog), hooks_(hooks) {}

  RecoveryReport run() {
    std::set<std::string> known;
    for (const auto& sandbox : catalog_.sandboxes()) {
      known.insert(sandbox.id);
      SandboxLock lock;
      if (!SandboxLock::acquire(layout_.lock(sandbox.id), std::chrono::milliseconds(0), lock)) {
        report_.skipped.push_back(sandbox.id);
        continue;
      }
      snapshots(sandbox.id);
      live(sandbox);
    }
    leftovers(known);
    return report_;
  }

 private:
  void act(std::string line) { report_.actions.push_back(std::move(line)); }
  bool discard_live(const std::string& id) { return hooks_.discard_live && hooks_.discard_live(id); }

  void snapshots(const std::string& id) {
    fs::path dir = layout_.snapshots(id);
    std::set<std::string> recorded;
    for (const auto& s : catalog_.snapshots(id, true)) {
      recorded.insert(fs::path(s.path).filename().string());
      bool present = fs::exists(store_.file(s));
      if (s.complete && !present) {
        catalog_.remove_snapshot(s.id);
        act("snapshot " + s.id + " of " + id + ": its file is gone; dropped from the catalog");
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
      } else if (name.size() > 8 && name.ends_with(".tar.zst") && !recorded.count(name)) {
        adopt(id, entry.path());
      }
    }
  }

  void adopt(const std::string& id, const fs::path& file) {
    try {
      ExtractResult r = verify_archive(file);
      SnapshotRecord s;
      s.id = file.filename().string().substr(0, file.filename().string().size() - 8);
      s.sandbox = id;
      s.created_at = iso_now();
      s.bytes = fs::file_size(file);
      s.files = r.files;
      s.digest = r.digest;
      s.path = fs::relative(file, layout_.root).string();
      s.reason = "recovered";
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
    bool has_snapshot = catalog_.latest_snapshot(sandbox.id).has_value();
    if (sandbox.state == "snapshotting" || sandbox.state == "starting") {
      catalog_.set_state(sandbox.id, "active");
      act("sandbox " + sandbox.id + ": was " + sandbox.state + "; its live directories are kept and adopted");
    } else if ((sandbox.state == "stopped" || sandbox.state == "restoring") && has_snapshot) {
      if (!discard_live(sandbox.id)) {
        for (const auto& tree : layout_.trees(sandbox.id)) {
          if (fs::exists(tree.dir, ec)) discard_dir(layout_, tree.dir);
        }
      }
      if (sandbox.state == "restoring") {
        catalog_.set_state(sandbox.id, "stopped", sandbox.restore_snapshot);
        act("sandbox " + sandbox.id + ": a restore was cut short; the next call restores " +
            (sandbox.restore_snapshot.empty() ? "the latest snapshot" : sandbox.restore_snapshot));
      } else if (has_live) {
        act("sandbox " + sandbox.id + ": stopped with leftover live directories; removed (its snapshot holds them)");
      }
    } else if (sandbox.state == "active" && !has_live && has_snapshot) {
      catalog_.set_state(sandbox.id, "stopped");
      act("sandbox " + sandbox.id + ": active without live directories; its latest snapshot will be restored");
    } else if ((sandbox.state == "stopped" || sandbox.state == "restoring") && has_live) {
      catalog_.set_state(sandbox.id, "active");
      act("sandbox " + sandbox.id + ": marked " + sandbox.state + " but has no snapshot; live directories kept");
    }
    if (sandbox.owner_pid != 0) catalog_.set_owner(sandbox.id, 0);
  }

  void leftovers(const std::set<std::string>& known) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(layout_.sandboxes(), ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind(".trash-", 0) == 0) {
        fs::remove_all(entry.path(), ec);
        act("removed trash " + entry.path().string());
      } else if (!known.count(name) && entry.is_directory(ec)) {
        SandboxLock lock;
        if (!SandboxLock::acquire(layout_.lock(name), std::chrono::milliseconds(0), lock)) continue;
        // Rows are written before directories, so no server is creating it.
        if (catalog_.find_sandbox(name)) continue;
        discard_live(name);
        fs::remove_all(entry.path(), ec);
        act("removed directory " + entry.path().string() + " of a sandbox the catalog no longer knows");
      }
    }
  }

  const StateLayout& layout_;
  Catalog& catalog_;
  SnapshotStore store_;
  RecoveryReport report_;
  const RecoveryHooks& hooks_;
};

}  // namespace

RecoveryReport recover(const StateLayout& layout, Catalog& catalog, const RecoveryHooks& hooks) {
  return Recovery(layout, catalog, hooks).run();
}

}  // namespace agentbox::persistence
