#include "sandbox/manager_impl.h"

#include "os/errno_text.h"
#include "persistence/recovery.h"
#include "persistence/tree_fs.h"
#include "sandbox/host_dirs.h"
#include "sandbox/uid_range.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;
using persistence::SandboxState;

namespace {

void create_state_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw SandboxError(codes::kSandboxStartFailed, "cannot create the state directory " + dir.string() + ": " + ec.message());
}

}  // namespace

SandboxState ManagedSandbox::state() const {
  std::lock_guard lock(mutex_);
  if (phase_) return *phase_;
  if (client_ && client_->alive()) return SandboxState::Active;
  return client_ && !client_->stopped() ? SandboxState::Failed : SandboxState::Stopped;
}

std::shared_ptr<AgentClient> ManagedSandbox::client() const {
  std::lock_guard lock(mutex_);
  return client_;
}

bool ManagedSandbox::running() const {
  std::lock_guard lock(mutex_);
  return client_ && client_->alive();
}

double ManagedSandbox::cpu_quota() const {
  std::lock_guard lock(mutex_);
  return box_ ? box_->cpu_quota() : 0;
}

bool ManagedSandbox::cgroup_memory() const {
  std::lock_guard lock(mutex_);
  return box_ && box_->limits_memory();
}

bool ManagedSandbox::cgroup_pids() const {
  std::lock_guard lock(mutex_);
  return box_ && box_->limits_pids();
}

std::uint64_t Sandbox::workspace_bytes() const {
  if (auto disk = disk_usage(dirs_.root)) return disk->used_bytes;  // its own filesystem: statvfs
  return persistence::tree_disk_bytes(dirs_.workspace());  // follows no symlink (tree_fs.h)
}

Lease::Lease(std::shared_ptr<Sandbox> sandbox, std::string notice)
    : sandbox_(std::move(sandbox)), notice_(std::move(notice)) {}

Lease::~Lease() {
  if (!sandbox_) return;
  auto& managed = static_cast<ManagedSandbox&>(*sandbox_);  // the manager makes no other kind
  std::lock_guard lock(managed.mutex_);
  --managed.in_use_;
  managed.last_used_ = std::chrono::steady_clock::now();
}

AgentClient& Lease::agent() const {
  auto client = sandbox_->client();
  return *client;  // the sandbox keeps its client alive while leased
}

ManagerImpl::ManagerImpl(ManagerOptions options) : options_(std::move(options)) {
  root_ = geteuid() == 0;
  check_uid_range();
  create_state_dir(options_.state_dir);
  layout_.root = options_.state_dir;
  make_state_subdir(options_.state_dir / "snapshots", 0700);
  make_state_subdir(options_.state_dir / "locks", 0700);
  driver_ = make_driver(options_, layout_, describe(uid_range_));  // its storage is up before recovery reads it
  open_catalog();
  open_store();
  resolve_warm_budget();
  evict_warm();  // a smaller bound than the last server's
  driver_->remove_stale();
  idle_thread_ = std::thread([this] { idle_main(); });
  if (options_.spare != ManagerOptions::Spare::None && access("/bin/sh", X_OK) != 0) {
    spdlog::warn("no /bin/sh: sandboxes are not prepared ahead (each new conversation starts from scratch)");
    options_.spare = ManagerOptions::Spare::None;
  }
  auto kind = options_.spare == ManagerOptions::Spare::Warm       ? SparePool::Kind::Warm
              : options_.spare == ManagerOptions::Spare::Prepared ? SparePool::Kind::Prepared
                                                                  : SparePool::Kind::None;
  spares_ = std::make_unique<SparePool>(
      kind, [this](bool warm) { return build_spare(warm); },
      [this] { return running() + 1 < options_.max_sandboxes; });
}

ManagerImpl::~ManagerImpl() { shutdown(); }

std::size_t ManagerImpl::running() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [conversation, s] : sandboxes_) n += s->state() == SandboxState::Active;
  return n;
}

Lease ManagerImpl::acquire(const std::string& conversation, const ProgressFn& progress) {
  bring_from_store(conversation);
  auto sandbox = entry(conversation, /*claim_spare=*/true);
  std::lock_guard life(sandbox->lifecycle_);
  std::string notice;
  if (!sandbox->running()) {
    take_lock(*sandbox);
    auto record = catalog_->find_sandbox(sandbox->id());
    if (!record || record->state == SandboxState::Destroying) {
      // Destroyed by another server since this one last looked: start over.
      {
        std::lock_guard lock(mutex_);
        sandboxes_.erase(conversation);
      }
      release_lock(*sandbox);
      throw SandboxError(codes::kSandboxBusy, "this conversation's sandbox was just destroyed by another agentbox "
                                              "server on the same state directory; call again for a fresh one");
    }
    auto client = sandbox->client();
    bool died = client && !client->stopped();
    if (record->state == SandboxState::Stopped || record->state == SandboxState::Clearing) {
      notice = resume_stopped(*sandbox, *record, progress);
    } else if (died) {
      std::string reason = client->death_reason();
      notice = "this conversation's sandbox had stopped (" + (reason.empty() ? "unknown reason" : reason) +
               ") and was restarted: running processes are gone and sessions are back as last saved; "
               "files in /workspace and /home/user are kept";
    }
    start_agent(*sandbox);
    std::string services = bring_back(*sandbox, *record);
    if (!services.empty()) notice += (notice.empty() ? "" : "; ") + services;
  }
  std::lock_guard slock(sandbox->mutex_);
  if (!sandbox->kept_live_.empty()) notice += (notice.empty() ? "" : "; ") + std::exchange(sandbox->kept_live_, "");
  ++sandbox->in_use_;
  sandbox->last_used_ = std::chrono::steady_clock::now();
  return Lease(sandbox, notice);
}

std::optional<Lease> ManagerImpl::try_acquire(const std::string& conversation) {
  std::shared_ptr<ManagedSandbox> sandbox;
  {
    // Not find(): mutex_ can be held across a catalog write or a spare's
    // teardown, and the caller may be the server's stdin reader.
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    auto it = sandboxes_.find(conversation);
    if (it == sandboxes_.end()) return std::nullopt;
    sandbox = it->second;
  }
  std::unique_lock life(sandbox->lifecycle_, std::try_to_lock);
  if (!life.owns_lock() || !sandbox->running()) return std::nullopt;
  std::lock_guard slock(sandbox->mutex_);
  ++sandbox->in_use_;
  sandbox->last_used_ = std::chrono::steady_clock::now();
  return Lease(sandbox, "");
}

std::shared_ptr<ManagedSandbox> ManagerImpl::find(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(conversation);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::size_t ManagerImpl::running_locked(const ManagedSandbox& starting) const {
  std::size_t running = 0;
  for (const auto& [conversation, s] : sandboxes_) {
    if (s.get() == &starting) continue;
    SandboxState state = s->state();
    running += state == SandboxState::Active || state == SandboxState::Starting;
  }
  return running;
}

std::shared_ptr<ManagedSandbox> ManagerImpl::pick_eviction_locked(const ManagedSandbox& starting) {
  std::shared_ptr<ManagedSandbox> oldest;
  for (const auto& [conversation, s] : sandboxes_) {
    if (s.get() == &starting || s->state() != SandboxState::Active) continue;
    std::lock_guard lock(s->mutex_);
    if (s->in_use_ == 0 && (!oldest || s->last_used_ < oldest->last_used_)) oldest = s;
  }
  if (running_locked(starting) < options_.max_sandboxes || !oldest) return nullptr;
  spdlog::info("sandbox {} ({}) stopped to make room: at most {} run at once", oldest->id(), oldest->conversation(),
               options_.max_sandboxes);
  return oldest;
}

void ManagerImpl::start_agent(ManagedSandbox& sandbox_ref) {
  ManagedSandbox* sandbox = &sandbox_ref;
  // The spare is replaced once no start is in progress (it would compete
  // with this one for the CPU).
  SparePool::StartGuard starting(*spares_);
  struct EndPhase {
    ManagedSandbox& s;
    ~EndPhase() {
      std::lock_guard slock(s.mutex_);
      if (s.phase_ == SandboxState::Starting) s.phase_.reset();
    }
  } end_phase{*sandbox};
  // mutex_ is held only to pick a sandbox to evict and to mark this one
  // "starting" (counted against max_sandboxes): a slow start must not hold up
  // other conversations. lifecycle_, held by the caller, makes a second call
  // for this conversation wait for this start.
  std::shared_ptr<ManagedSandbox> evicted;
  std::unique_ptr<PreparedSandbox> warm_spare;  // dropped to make room
  {
    std::lock_guard lock(mutex_);
    // A warm spare counts toward max_sandboxes, and goes first.
    if (running_locked(*sandbox) + 1 >= options_.max_sandboxes) warm_spare = spares_->take_warm();
    evicted = pick_eviction_locked(*sandbox);
    std::lock_guard slock(sandbox->mutex_);
    sandbox->phase_ = SandboxState::Starting;
  }
  warm_spare.reset();
  if (evicted) evict(*evicted);
  stop(*sandbox);  // what a dead agent left (its cgroup)

  std::unique_ptr<PreparedSandbox> prepared;
  {
    std::lock_guard slock(sandbox->mutex_);
    prepared = std::move(sandbox->prepared_);
  }
  if (prepared && (prepared->id != sandbox->id_ || !prepared->alive())) {
    spdlog::info("sandbox {}: its prepared launcher is gone; starting from scratch", sandbox->id_);
    prepared->claimed = true;  // the directories are this conversation's
    prepared.reset();
  }
  std::shared_ptr<AgentClient> client;
  bool hello = true;
  std::unique_ptr<Box> box;
  if (prepared) {
    // Directories, cgroup and the launcher's cgroup join were done ahead.
    box = std::move(prepared->box);
    box->release();  // done already when it was claimed
    hello = !prepared->warm;
    spdlog::debug("sandbox {}: started from a {} spare", sandbox->id_, prepared->warm ? "warm" : "prepared");
  } else {
    assign_owner(sandbox->id_, sandbox->dirs_);
    box = driver_->start(sandbox->id_, sandbox->dirs_, /*held=*/false);
  }
  client = box->agent();
  Box* started = box.get();
  {
    std::lock_guard slock(sandbox->mutex_);
    sandbox->box_ = std::move(box);
  }
  if (hello) client->await_hello(options_.start_timeout);
  if (options_.proxy) attach_proxy(*sandbox, *started);  // stays while lifecycle_ is held
  {
    std::lock_guard slock(sandbox->mutex_);
    sandbox->previous_client_ = std::move(sandbox->client_);
    sandbox->client_ = std::move(client);
    sandbox->captured_ = std::chrono::steady_clock::now();  // what it starts on is a snapshot, or new
  }
  spdlog::info("sandbox {} started for conversation '{}'", sandbox->id_, sandbox->conversation_);
}

std::unique_ptr<PreparedSandbox> ManagerImpl::build_spare(bool warm) {
  auto p = std::make_unique<PreparedSandbox>();
  p->id = persistence::random_hex(12);
  p->dirs.root = layout_.sandbox(p->id);
  p->driver = driver_.get();
  // The lock first: another server's recovery leaves a directory alone while
  // its lock is held, and removes it after a crash.
  if (!persistence::SandboxLock::acquire(layout_.lock(p->id), std::chrono::milliseconds(0), p->lock))
    throw SandboxError(codes::kSandboxStartFailed, "the lock of a fresh sandbox id is taken");
  assign_spare_owner(*p);  // its uid when it is prepared, given back if it is discarded
  p->box = driver_->start(p->id, p->dirs, /*held=*/true);
  if (warm) {
    p->box->release();
    p->box->agent()->await_hello(options_.start_timeout);
    p->warm = true;
  }
  return p;
}


void ManagerImpl::evict(ManagedSandbox& sandbox) {
  // The victim was picked with in_use_ == 0 under mutex_, but acquire() may
  // have leased it since: it holds lifecycle_ while it checks and counts the
  // lease, so a held lifecycle_ or a lease means "in use, spare it".
  std::unique_lock life(sandbox.lifecycle_, std::try_to_lock);
  if (!life.owns_lock()) return;
  {
    std::lock_guard lock(sandbox.mutex_);
    if (sandbox.in_use_ > 0) return;
  }
  stop(sandbox);
}

void ManagerImpl::stop(ManagedSandbox& sandbox) {
  std::shared_ptr<AgentClient> client;
  std::unique_ptr<Box> box;
  {
    std::lock_guard lock(sandbox.mutex_);
    client = sandbox.client_;
    box = std::move(sandbox.box_);
  }
  if (options_.proxy) options_.proxy->detach(sandbox.id());
  if (box) box->stop();  // its agent, then what is left in it (its cgroup)
  if (client) client->stop();  // already stopped with its box, unless a failed start replaced the box
}


// Manager: the public face, all of it forwarded.
Manager::Manager(ManagerOptions options) : impl_(std::make_unique<ManagerImpl>(std::move(options))) {}
Manager::~Manager() = default;
Lease Manager::acquire(const std::string& conversation, const ProgressFn& progress) {
  return impl_->acquire(conversation, progress);
}
std::optional<Lease> Manager::try_acquire(const std::string& conversation) { return impl_->try_acquire(conversation); }
std::shared_ptr<Sandbox> Manager::find(const std::string& conversation) { return impl_->find(conversation); }
bool Manager::destroy(const std::string& conversation, bool keep_snapshots) {
  return impl_->destroy(conversation, keep_snapshots);
}
void Manager::shutdown() { impl_->shutdown(); }
SnapshotInfo Manager::snapshot(const std::string& conversation, const std::string& label, const ProgressFn& progress) {
  return impl_->snapshot(conversation, label, progress);
}
SnapshotInfo Manager::restore(const std::string& conversation, const std::string& snapshot_id,
                              const ProgressFn& progress) {
  return impl_->restore(conversation, snapshot_id, progress);
}
std::vector<persistence::SnapshotRecord> Manager::snapshots(const std::string& conversation) {
  return impl_->snapshots(conversation);
}
std::optional<persistence::SandboxRecord> Manager::record(const std::string& conversation) {
  return impl_->record(conversation);
}
bool Manager::teardown(const std::string& conversation) { return impl_->teardown(conversation); }
ForkResult Manager::fork(const std::string& conversation, const std::string& snapshot_id,
                         const std::string& to_conversation, int count, const ProgressFn& progress) {
  return impl_->fork(conversation, snapshot_id, to_conversation, count, progress);
}
persistence::Catalog& Manager::catalog() { return *impl_->catalog_; }
const persistence::StateLayout& Manager::layout() const { return impl_->layout_; }
const ManagerOptions& Manager::options() const { return impl_->options_; }
std::string Manager::spare_state() { return impl_->spares_->state(); }
const CgroupSupport& Manager::cgroups() const { return impl_->driver_->cgroups(); }
const Disks& Manager::disks() const { return impl_->driver_->disks(); }
std::size_t Manager::running() const { return impl_->running(); }

}  // namespace agentbox::sandbox
