// The manager's persistent lifecycle: catalog entries, the per-sandbox lock,
// saved sessions, idle teardown, snapshots, restores, destroy and shutdown.
// The crash-ordered sequences themselves are persistence/lifecycle.h (the
// crash test runs the same functions); this file adds the host side: the
// box's processes, its filesystem (through the driver), what the caller is
// told.
#include "sandbox/manager_impl.h"

#include "contract/agent_methods.h"
#include "persistence/lifecycle.h"
#include "persistence/recovery.h"

#include <spdlog/spdlog.h>

#include <future>
#include <sys/statvfs.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using persistence::SandboxState;

std::int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

persistence::ArchiveProgressFn progress_adapter(const ProgressFn& progress, const std::string& what) {
  if (!progress) return {};
  return [progress, what](const persistence::ArchiveProgress& p) {
    std::optional<double> total;
    if (p.total_bytes) total = static_cast<double>(*p.total_bytes);
    progress(static_cast<double>(p.bytes), total,
             what + ": " + std::to_string(p.files) + " entries, " + std::to_string(p.bytes >> 20) + " MiB");
  };
}

// A failure to write the state directory: NO_SPACE naming the filesystem and
// what to free when the disk is full (docs/design.md section 8), else `code`.
SandboxError ManagerImpl::state_error(const std::exception& e, const std::string& code, const std::string& what) const {
  if (auto s = dynamic_cast<const SandboxError*>(&e)) return *s;
  if (!persistence::disk_full(e)) return SandboxError(code, what + ": " + e.what());
  struct statvfs fs{};
  std::string free_space =
      statvfs(layout_.root.c_str(), &fs) == 0 ? std::to_string(fs.f_bavail * fs.f_frsize >> 10) + " KiB free" : "";
  return SandboxError(codes::kNoSpace,
                      what + ": the filesystem of the state directory " + layout_.root.string() + " is full (" +
                          free_space + "; " + e.what() + "). Nothing was changed. Free space there: delete files "
                          "in /workspace (file_delete or exec rm), old snapshots (`agentbox snapshot prune --state-dir " +
                          layout_.root.string() + "`) or other files on that filesystem, then call again");
}

// Opens the catalog, setting a damaged one aside first, and repairs what a
// crash left (docs/persistence.md, "Crash safety and recovery").
void ManagerImpl::open_catalog() {
  std::string damaged;
  try {
    damaged = persistence::set_aside_damaged_catalog(layout_);
    catalog_ = std::make_unique<persistence::Catalog>(layout_.catalog());
  } catch (const std::exception& e) {
    throw SandboxError(codes::kSandboxStartFailed, e.what());
  }
  if (!damaged.empty()) spdlog::error("recovery: {}", damaged);
  store_ = std::make_unique<persistence::SnapshotStore>(layout_, *catalog_, options_.snapshot_timeout);
  store_->set_max_chain(options_.snapshot_chain);
  // With the driver's hooks: a sandbox recovery discards (a destroy it
  // finishes, leftovers) loses its own filesystem too, not just the files.
  auto report = persistence::recover(layout_, *catalog_, !damaged.empty(), recovery_hooks(driver_->disks(), layout_, &driver_->parking()));
  for (const auto& line : report.failed) spdlog::error("recovery: could not repair {} (retried at the next start)", line);
  for (const auto& line : report.actions) spdlog::warn("recovery: {}", line);
  for (const auto& id : report.skipped) spdlog::info("recovery: sandbox {} is driven by another server; left alone", id);
}

std::shared_ptr<ManagedSandbox> ManagerImpl::entry(const std::string& conversation, bool claim_spare) {
  std::lock_guard lock(mutex_);
  if (auto it = sandboxes_.find(conversation); it != sandboxes_.end()) return it->second;
  persistence::SandboxRecord record;
  // A new conversation's first call claims the spare (made ready ahead, its
  // id already locked by this server); an existing one never calls new_id.
  // Only acquire() claims: a restore or destroy of a conversation that has
  // no sandbox must not start one.
  std::unique_ptr<PreparedSandbox> claimed;
  try {
    record = catalog_->sandbox_for(conversation, [&] {
      if (claim_spare) claimed = spares_->take();
      return claimed ? claimed->id : persistence::random_hex(12);
    });
  } catch (const persistence::CatalogError& e) {
    throw state_error(e, codes::kSandboxStartFailed, "cannot record this conversation's sandbox");
  }
  if (claimed && claimed->id != record.id) claimed.reset();  // another server created the row first
  // For a catalog rebuilt from disk (docs/persistence.md, "Crash safety").
  persistence::record_conversation(layout_, record.id, conversation);
  auto sandbox = std::make_shared<ManagedSandbox>();
  sandbox->conversation_ = conversation;
  sandbox->id_ = record.id;
  sandbox->dirs_.root = layout_.sandbox(record.id);
  if (claimed) {
    // bwrap starts now, while the caller takes the lock and reads the
    // catalog; start_agent waits for the agent's hello.
    claimed->box->release();
    claimed->claimed = true;
    sandbox->dirs_.owner = claimed->dirs.owner;  // its files are already the spare's host ids
    sandbox->lock_ = std::move(claimed->lock);
    sandbox->prepared_ = std::move(claimed);
  }
  sandboxes_[conversation] = sandbox;
  return sandbox;
}

void ManagerImpl::take_lock(ManagedSandbox& sandbox) {
  if (sandbox.lock_.held()) {
    if (!sandbox.owner_recorded_) {
      try {
        catalog_->set_owner(sandbox.id(), getpid());  // a claimed spare's lock
      } catch (const std::exception& e) {
        spdlog::warn("sandbox {}: {}", sandbox.id(), e.what());
      }
    }
    sandbox.owner_recorded_ = true;
    return;
  }
  if (!persistence::SandboxLock::acquire(layout_.lock(sandbox.id()), options_.lock_wait, sandbox.lock_)) {
    auto record = catalog_->find_sandbox(sandbox.id());
    std::string who = record && record->owner_pid ? " (pid " + std::to_string(record->owner_pid) + ")" : "";
    throw SandboxError(codes::kSandboxBusy,
                       "conversation '" + sandbox.conversation() + "' (sandbox " + sandbox.id() +
                           ") is being driven by another agentbox server" + who +
                           " on the same state directory; waited " +
                           std::to_string(options_.lock_wait.count() / 1000) +
                           " s. Try again when it goes idle, or use another conversation id");
  }
  try {
    catalog_->set_owner(sandbox.id(), getpid());  // informational: a full disk must not refuse the call
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: {}", sandbox.id(), e.what());
  }
  sandbox.owner_recorded_ = true;
}

void ManagerImpl::release_lock(ManagedSandbox& sandbox) {
  if (!sandbox.lock_.held()) return;
  sandbox.owner_recorded_ = false;
  try {
    catalog_->set_owner(sandbox.id(), 0);
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: {}", sandbox.id(), e.what());
  }
  sandbox.lock_.release();
}

void ManagerImpl::save_sessions(ManagedSandbox& sandbox, std::chrono::milliseconds timeout) {
  auto client = sandbox.client();
  if (!client || !client->alive()) return;
  try {
    json result = client->call("session.export", json::object(), timeout);
    std::vector<persistence::SessionRecord> sessions;
    for (const auto& s : result.value("sessions", json::array()))
      sessions.push_back({s.value("session", ""), s.value("cwd", "/workspace"), s.value("state", "")});
    catalog_->save_sessions(sandbox.id(), sessions);
    std::lock_guard lock(sandbox.mutex_);
    sandbox.sessions_saved_ = Clock::now();
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: could not save its sessions: {}", sandbox.id(), e.what());
  }
}

void ManagerImpl::record_lost_processes(ManagedSandbox& sandbox) {
  auto client = sandbox.client();
  if (!client || !client->alive()) return;
  try {
    json list = client->call("process.list", json::object(), std::chrono::seconds(2));
    json lost = json::array();
    for (const auto& p : list.value("processes", json::array())) {
      if (p.value("restart", "") == "on-restore") continue;  // started again after the restore (bring_back)
      if (p.value("status", "") == "running" || p.value("status", "") == "lost")
        lost.push_back({{"process_id", p.value("process_id", "")}, {"command", p.value("command", "")}});
    }
    // Terminals end with the box as well; they share the column, told apart
    // by terminal_id (bring_back hands them to terminal.adopt_lost).
    json terminals = client->call("terminal.list", json::object(), std::chrono::seconds(2));
    for (const auto& t : terminals.value("terminals", json::array()))
      if (t.value("status", "") == "running" || t.value("status", "") == "lost")
        lost.push_back({{"terminal_id", t.value("terminal_id", "")}, {"command", t.value("command", "")}});
    catalog_->set_lost_processes(sandbox.id(), lost.dump());
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: could not list its processes: {}", sandbox.id(), e.what());
  }
}

namespace {

// Asks the agent to start the services its workspace records (agent/
// services.h); what it says comes from inside the sandbox, so only its
// shape is used, and the notice is bounded.
std::string restore_services(AgentClient& client, const std::string& id) {
  json result = client.call(contract::methods::kProcessRestoreServices, json::object(), std::chrono::seconds(10));
  std::string started, failed;
  std::size_t shown = 0;
  auto add = [&](std::string& to, const std::string& item) {
    if (++shown > 8) return;
    to += (to.empty() ? "" : ", ") + item.substr(0, 200);
  };
  for (const auto& p : result.value("started", json::array()))
    if (p.is_object() && p.contains("process_id") && p["process_id"].is_string())
      add(started, p["process_id"].get<std::string>() +
                       (p.contains("command") && p["command"].is_string() ? " (" + p["command"].get<std::string>() + ")" : ""));
  for (const auto& p : result.value("failed", json::array()))
    if (p.is_object() && p.contains("process_id") && p["process_id"].is_string())
      add(failed, p["process_id"].get<std::string>() +
                      (p.contains("error") && p["error"].is_string() ? ": " + p["error"].get<std::string>() : ""));
  std::string notice;
  if (!started.empty()) notice = "services started again: " + started;
  if (!failed.empty()) notice += (notice.empty() ? "" : "; ") + std::string("services that could not start again: ") + failed;
  if (result.contains("problem") && result["problem"].is_string()) {
    std::string problem = result["problem"].get<std::string>().substr(0, 400);
    spdlog::warn("sandbox {}: {}", id, problem);
    notice += (notice.empty() ? "" : "; ") + problem;
  }
  return notice;
}

}  // namespace

// A freshly started agent gets the sessions and the list of processes a
// teardown ended back from the catalog, then starts its services again.
std::string ManagerImpl::bring_back(ManagedSandbox& sandbox, const persistence::SandboxRecord& record) {
  auto client = sandbox.client();
  auto sessions = catalog_->sessions(sandbox.id());
  try {
    if (!sessions.empty()) {
      json list = json::array();
      for (const auto& s : sessions) list.push_back({{"session", s.name}, {"cwd", s.cwd}, {"state", s.state}});
      client->call("session.import", {{"sessions", list}}, std::chrono::seconds(10));
    }
    json lost = json::parse(record.lost_processes, nullptr, false);
    if (lost.is_array() && !lost.empty()) {
      json processes = json::array(), terminals = json::array();
      for (auto& entry : lost) (entry.is_object() && entry.contains("terminal_id") ? terminals : processes).push_back(entry);
      if (!processes.empty()) client->call("process.adopt_lost", {{"processes", processes}}, std::chrono::seconds(10));
      if (!terminals.empty()) client->call("terminal.adopt_lost", {{"terminals", terminals}}, std::chrono::seconds(10));
      catalog_->set_lost_processes(sandbox.id(), "[]");
    }
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: could not bring its sessions back: {}", sandbox.id(), e.what());
  }
  std::string notice;
  try {
    notice = restore_services(*client, sandbox.id());
  } catch (const std::exception& e) {
    spdlog::warn("sandbox {}: could not start its services again: {}", sandbox.id(), e.what());
    notice = std::string("services were not started again: ") + e.what();
  }
  try {
    persistence::activate(*catalog_, sandbox.id(), record.state,
                          {.warn = [&](const std::string& line) { spdlog::warn("sandbox {}: {}", sandbox.id(), line); }});
  } catch (const std::exception& e) {
    stop(sandbox);  // refuse to run on a restore the catalog does not hold as live (section 8)
    throw state_error(e, codes::kSandboxStartFailed, "cannot record the restored workspace as live");
  }
  std::lock_guard lock(sandbox.mutex_);
  sandbox.torn_down_ = false;
  sandbox.sessions_saved_ = Clock::now();
  return notice;
}

std::string ManagerImpl::restore_locked(ManagedSandbox& sandbox, const persistence::SnapshotRecord& snapshot,
                                        const ProgressFn& progress, SandboxState state_on_failure,
                                        const persistence::SandboxRecord* before) {
  auto start = Clock::now();
  {
    std::lock_guard lock(sandbox.mutex_);
    sandbox.phase_ = SandboxState::Restoring;
  }
  persistence::RestoreResult result;
  try {
    persistence::Restore steps;
    steps.snapshot = &snapshot;
    // A clone's disk keeps its source's ids (disk_owner.h); a fresh one gets the sandbox's.
    steps.owner = [&] {
      auto own = owner(sandbox);
      auto stored = driver_->storage_owner(sandbox.dirs().root);
      return stored && own ? stored : own;
    };
    steps.extract = [&](std::optional<std::pair<unsigned, unsigned>> owner, const persistence::ArchiveProgressFn& p) {
      driver_->ensure_storage(sandbox.dirs().root);  // a fresh filesystem after a teardown (disk.h)
      return driver_->import_workspace(*store_, snapshot, owner, p);
    };
    steps.progress = progress_adapter(progress, "restoring " + snapshot.id);
    steps.on_failure = state_on_failure;
    steps.before = before;
    steps.warm = &driver_->parking();
    steps.hooks.warn = [&](const std::string& line) { spdlog::error("sandbox {}: {}", sandbox.id(), line); };
    result = persistence::restore(*catalog_, *store_, steps);
  } catch (const std::exception& e) {
    std::lock_guard lock(sandbox.mutex_);
    sandbox.phase_.reset();
    if (dynamic_cast<const SandboxError*>(&e)) throw;  // its storage could not be made (SANDBOX_START_FAILED)
    if (persistence::disk_full(e)) throw state_error(e, codes::kNoSpace, "could not restore snapshot " + snapshot.id);
    throw SandboxError(codes::kSnapshotCorrupt,
                       "snapshot " + snapshot.id + " cannot be restored: " + e.what() +
                           "; nothing was changed. Restore an older one (snapshot_list, sandbox_restore) or "
                           "sandbox_destroy for a fresh workspace");
  }
  {
    std::lock_guard lock(sandbox.mutex_);
    sandbox.phase_.reset();
  }
  auto ms = ms_since(start);
  std::string how = result.warm ? "from its warm copy (kept on disk since the teardown; no extraction)"
                                : "from its archive";
  if (!result.cache_miss.empty()) {
    spdlog::warn("sandbox {}: warm copy not used: {}", sandbox.id(), result.cache_miss);
    how += " (its warm copy was not used: " + result.cache_miss + ")";
  }
  spdlog::info("sandbox {}: restored snapshot {} ({} entries) {} in {} ms", sandbox.id(), snapshot.id,
               result.extract.files, result.warm ? "warm" : "from the archive", ms);
  return "restored this conversation's workspace from snapshot " + snapshot.id + " (taken " + snapshot.created_at +
         ", " + std::to_string(result.extract.files) + " entries) " + how + " in " + std::to_string(ms) +
         " ms; sessions are back with their working directory and environment, background processes ended at the "
         "teardown";
}

bool ManagerImpl::teardown(const std::string& conversation) {
  auto sandbox = find(conversation);
  return sandbox && teardown(sandbox);
}

bool ManagerImpl::teardown(const std::shared_ptr<ManagedSandbox>& sandbox) {
  std::unique_lock life(sandbox->lifecycle_, std::try_to_lock);
  if (!life.owns_lock() || !sandbox->running()) return false;
  {
    std::lock_guard lock(sandbox->mutex_);
    if (sandbox->in_use_ > 0) return false;
    sandbox->phase_ = SandboxState::Snapshotting;
  }
  auto start = Clock::now();
  auto give_up = [&](const char* what, const std::exception& e) {
    // The live directories stay the truth; the next call starts on them.
    auto retry = std::max<std::chrono::milliseconds>(options_.idle_timeout, std::chrono::seconds(30));
    spdlog::error("sandbox {}: idle {} failed, keeping its directories (next try in {} s): {}", sandbox->id(), what,
                  retry.count() / 1000, state_error(e, codes::kSnapshotFailed, "idle teardown").what());
    {
      std::lock_guard lock(idle_mutex_);
      idle_backoff_[sandbox->id()] = Clock::now() + retry;  // a full disk stays full for a while
    }
    std::lock_guard lock(sandbox->mutex_);
    sandbox->phase_.reset();
    return false;
  };
  persistence::Teardown steps;
  steps.sandbox = sandbox->id();
  steps.stop = [&] {
    save_sessions(*sandbox, std::chrono::seconds(2));
    record_lost_processes(*sandbox);
    stop(*sandbox);
  };
  steps.take = [&] {
    auto record = driver_->export_workspace(*store_, sandbox->id(), "", "idle");
    if (replicator_) replicator_->nudge();
    return record;
  };
  steps.live_dirs = {sandbox->dirs().workspace(), sandbox->dirs().home(), sandbox->dirs().tmp()};
  steps.discard_live = [&] { return driver_->drop_storage(sandbox->dirs().root); };  // its own filesystem goes whole
  if (warm_budget_ > 0) steps.park = &driver_->parking();  // kept ready instead (evict_warm bounds the sum)
  steps.keep_snapshots = options_.keep_snapshots;
  steps.hooks.warn = [&](const std::string& line) { spdlog::warn("sandbox {}: {}", sandbox->id(), line); };
  // Stopped once the catalog says so: parking and pruning come after, and
  // sandbox_status then says what the catalog says.
  steps.hooks.reached = [&](const char* step) {
    if (std::string_view(step) != "stopped") return;
    std::lock_guard lock(sandbox->mutex_);
    sandbox->phase_ = SandboxState::Stopped;
  };
  auto result = persistence::tear_down(*catalog_, *store_, steps);
  if (result.error) {
    try {
      std::rethrow_exception(result.error);
    } catch (const std::exception& e) {
      if (!result.stopped) return give_up("teardown", e);  // nothing stopped yet: the sandbox keeps running
      {
        // The next call starts on the live directories and its notice says why
        // (what a restore would refuse, the snapshot refuses first).
        std::lock_guard lock(sandbox->mutex_);
        sandbox->kept_live_ = std::string("the idle snapshot failed, so the live workspace was kept and the sandbox "
                                          "restarted on it (running processes ended): ") + e.what();
      }
      return give_up("snapshot", e);
    }
  }
  const persistence::SnapshotRecord& snapshot = result.snapshot;
  for (const auto& gone : result.pruned)
    spdlog::info("sandbox {}: snapshot {} removed by retention", sandbox->id(), gone.id);
  {
    std::lock_guard lock(sandbox->mutex_);
    sandbox->phase_.reset();
    sandbox->torn_down_ = true;
  }
  release_lock(*sandbox);
  spdlog::info("sandbox {} ({}) idle: snapshot {} ({} bytes, {} entries) in {} ms, stopped{}", sandbox->id(),
               sandbox->conversation(), snapshot.id, snapshot.bytes, snapshot.files, ms_since(start),
               result.warm ? ", kept warm (" + std::to_string(result.warm->bytes >> 20) + " MiB)" : "");
  if (result.warm) evict_warm();
  return true;
}

void ManagerImpl::idle_main() {
  auto tick = options_.idle_timeout.count() > 0
                  ? std::clamp<std::chrono::milliseconds>(options_.idle_timeout / 4, std::chrono::milliseconds(20),
                                                          std::chrono::milliseconds(1000))
                  : std::chrono::milliseconds(1000);
  for (;;) {
    {
      std::unique_lock lock(idle_mutex_);
      if (idle_wake_.wait_for(lock, tick, [this] { return stopping_; })) return;
    }
    std::vector<std::shared_ptr<ManagedSandbox>> all;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [conversation, s] : sandboxes_) all.push_back(s);
    }
    for (const auto& sandbox : all) {
      if (!sandbox->running()) continue;
      checkpoint_step(sandbox);  // busy ones too: a long command is what a checkpoint is for
      Clock::time_point last_used, saved;
      {
        std::lock_guard lock(sandbox->mutex_);
        if (sandbox->in_use_ > 0) continue;  // a foreground command is running
        last_used = sandbox->last_used_;
        saved = sandbox->sessions_saved_;
      }
      {
        std::lock_guard lock(idle_mutex_);
        auto it = idle_backoff_.find(sandbox->id());
        if (it != idle_backoff_.end() && Clock::now() < it->second) continue;
      }
      // Sessions change only through calls: save them once after each burst,
      // so a crash loses as little as possible.
      if (last_used > saved) save_sessions(*sandbox, std::chrono::seconds(2));
      if (auto error = idle_step(sandbox, last_used)) spdlog::error("idle thread: sandbox {}: {}", sandbox->id(), *error);
    }
  }
}

// One sandbox's idle check; nothing it throws may end the idle thread (an
// uncaught error there ended the server, docs/design.md section 8).
std::optional<std::string> ManagerImpl::idle_step(const std::shared_ptr<ManagedSandbox>& sandbox, Clock::time_point last_used) {
  try {
    auto idle = Clock::now() - last_used;
    if (options_.idle_timeout.count() <= 0 || idle < options_.idle_timeout) return std::nullopt;
    if (idle < options_.background_keepalive) {
      bool busy = false;
      try {
        json list = sandbox->client()->call("process.list", json::object(), std::chrono::seconds(2));
        for (const auto& p : list.value("processes", json::array())) busy |= p.value("status", "") == "running";
        // A running terminal is background work too (a REPL, an editor left open).
        json terminals = sandbox->client()->call("terminal.list", json::object(), std::chrono::seconds(2));
        for (const auto& t : terminals.value("terminals", json::array())) busy |= t.value("status", "") == "running";
      } catch (const std::exception&) {
        return std::nullopt;
      }
      if (busy) return std::nullopt;
    }
    teardown(sandbox);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// The start of a sandbox the catalog holds as stopped (restore its snapshot)
// or whose destroy another server left half done ("clearing": finish it).
std::string ManagerImpl::resume_stopped(ManagedSandbox& sandbox, const persistence::SandboxRecord& record,
                                    const ProgressFn& progress) {
  if (record.state == SandboxState::Clearing) {
    fs::path root = sandbox.dirs().root;  // its own filesystem goes whole, as in destroy()
    persistence::finish_destroy(*catalog_, *store_, sandbox.id(), [&](const std::string& id) {
      driver_->parking().drop(id);  // a warm copy goes with it
      return driver_->drop_storage(root);
    });
    return "";
  }
  auto snapshot = persistence::resume_target(*catalog_, record);
  // Never an empty box in place of a lost workspace (docs/design.md section 4).
  if (!snapshot)
    throw SandboxError(codes::kSnapshotCorrupt,
                       "this conversation's workspace was stored in snapshot " +
                           (record.restore_snapshot.empty() ? std::string("(none recorded)") : record.restore_snapshot) +
                           ", which the catalog no longer has; nothing was changed. sandbox_destroy gives a fresh "
                           "workspace; `agentbox doctor` lists what recovery kept aside");
  return restore_locked(sandbox, *snapshot, progress, SandboxState::Stopped);
}

std::vector<persistence::SnapshotRecord> ManagerImpl::snapshots(const std::string& conversation) {
  auto record = catalog_->find_by_conversation(conversation);
  if (!record) return {};
  auto list = catalog_->snapshots(record->id);
  for (auto& s : list) s.total_bytes = store_->total_bytes(s);
  return list;
}

std::optional<persistence::SandboxRecord> ManagerImpl::record(const std::string& conversation) {
  return catalog_->find_by_conversation(conversation);
}

bool ManagerImpl::destroy(const std::string& conversation, bool keep_snapshots) {
  if (!find(conversation) && !catalog_->find_by_conversation(conversation)) return false;
  auto sandbox = entry(conversation);
  std::lock_guard life(sandbox->lifecycle_);
  take_lock(*sandbox);
  stop(*sandbox);
  // Crash-ordered (docs/persistence.md, "Destroy"): the catalog records it
  // first, so a crash leaves the old sandbox or one recovery finishes.
  // keep_snapshots keeps the sandbox id (and so its snapshots) for the
  // conversation; the next call starts empty, as after any destroy.
  try {
    fs::path root = sandbox->dirs().root;  // its own filesystem goes whole, once the catalog has the destroy
    persistence::destroy(*catalog_, *store_, sandbox->id(), keep_snapshots, [&](const std::string& id) {
      driver_->parking().drop(id);  // a warm copy goes with it
      return driver_->drop_storage(root);
    });
  } catch (const std::exception& e) {
    // Re-read from the catalog on the next call: the old sandbox if the
    // destroy was not recorded, else a fresh one (recovery finishes it).
    {
      std::lock_guard lock(mutex_);
      sandboxes_.erase(conversation);
    }
    release_lock(*sandbox);
    throw state_error(e, codes::kIoError, "could not destroy the sandbox");
  }
  if (options_.proxy) options_.proxy->forget(sandbox->id());  // its denials go with it
  if (replicator_ && !keep_snapshots) replicator_->forget(conversation, sandbox->id());
  {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(conversation);
  }
  release_lock(*sandbox);
  return true;
}

void ManagerImpl::shutdown() {
  {
    std::lock_guard lock(idle_mutex_);
    stopping_ = true;
  }
  idle_wake_.notify_all();
  if (idle_thread_.joinable() && idle_thread_.get_id() != std::this_thread::get_id()) idle_thread_.join();
  if (replicator_) replicator_->stop();  // what is not in the store yet goes at the next start
  spares_->stop();  // an unclaimed spare leaves nothing behind
  std::map<std::string, std::shared_ptr<ManagedSandbox>> all;
  {
    std::lock_guard lock(mutex_);
    all.swap(sandboxes_);
  }
  // In parallel: hosts give a server about 2 s after closing its stdin.
  std::vector<std::future<void>> stops;
  for (auto& [conversation, sandbox] : all) {
    stops.push_back(std::async(std::launch::async, [this, sandbox = sandbox] {
      save_sessions(*sandbox, std::chrono::milliseconds(500));
      stop(*sandbox);
      // The workspace stays on disk, "active" in the catalog: the next start adopts it.
      std::unique_lock life(sandbox->lifecycle_, std::try_to_lock);
      if (!life.owns_lock()) return;
      driver_->detach_storage(sandbox->dirs().root);  // the image stays; the next start mounts it
      release_lock(*sandbox);
    }));
  }
  for (auto& f : stops) f.wait();
  driver_->detach_idle_storage();
}

}  // namespace agentbox::sandbox
