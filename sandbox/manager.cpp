#include "sandbox/manager.h"

#include "persistence/recovery.h"
#include "persistence/tree_fs.h"
#include "sandbox/host_dirs.h"
#include "sandbox/limits_report.h"
#include "sandbox/uid_range.h"

#include <spdlog/spdlog.h>

#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

void make_dir(const fs::path& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
    throw SandboxError(codes::kSandboxStartFailed, errno_message("cannot create " + dir.string(), errno));
  chmod(dir.c_str(), mode);
}

void create_state_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw SandboxError(codes::kSandboxStartFailed, "cannot create the state directory " + dir.string() + ": " + ec.message());
}

// Whether a root server stages each sandbox's directories (staging.h): not
// when it may not make mount namespaces (a container's root without
// CAP_SYS_ADMIN); bwrap then binds by path, and the state directory and the
// sandbox directories must be traversable by the sandbox user (0711). Found
// once per process.
bool stages() {
  static const bool possible = [] {
    if (geteuid() != 0) return false;
    pid_t pid = fork();
    if (pid == 0) _exit(unshare(CLONE_NEWNS) == 0 ? 0 : 1);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return possible;
}

// The agent to run when none is configured: agentbox-agent next to this
// binary (small and static, docs/sandbox.md "Performance"), else this
// binary itself in agent mode.
fs::path default_agent() {
  fs::path self = fs::read_symlink("/proc/self/exe");
  fs::path lean = self.parent_path() / "agentbox-agent";
  return access(lean.c_str(), X_OK) == 0 ? lean : self;
}

}  // namespace

std::string Sandbox::state() const {
  std::lock_guard lock(mutex_);
  if (!phase_.empty()) return phase_;
  if (client_ && client_->alive()) return "active";
  return client_ && !client_->stopped() ? "failed" : "stopped";
}

std::shared_ptr<AgentClient> Sandbox::client() const {
  std::lock_guard lock(mutex_);
  return client_;
}

bool Sandbox::running() const {
  std::lock_guard lock(mutex_);
  return client_ && client_->alive();
}

double Sandbox::cpu_quota() const {
  std::lock_guard lock(mutex_);
  return cgroup_ ? cgroup_->cpu_quota() : 0;
}

std::uint64_t Sandbox::workspace_bytes() const {
  if (auto disk = disk_usage(dirs_.root)) return disk->used_bytes;  // its own filesystem: statvfs
  return persistence::tree_disk_bytes(dirs_.workspace());  // follows no symlink (tree_fs.h)
}

Lease::Lease(std::shared_ptr<Sandbox> sandbox, std::string notice)
    : sandbox_(std::move(sandbox)), notice_(std::move(notice)) {}

Lease::~Lease() {
  if (!sandbox_) return;
  std::lock_guard lock(sandbox_->mutex_);
  --sandbox_->in_use_;
  sandbox_->last_used_ = std::chrono::steady_clock::now();
}

AgentClient& Lease::agent() const {
  auto client = sandbox_->client();
  return *client;  // the sandbox keeps its client alive while leased
}

Manager::Manager(ManagerOptions options) : options_(std::move(options)) {
  root_ = geteuid() == 0;
  cgroups_ = detect_cgroups();
  check_uid_range();
  if (root_ && !stages())
    spdlog::warn("this root server may not make mount namespaces (no CAP_SYS_ADMIN?): sandboxes bind their "
                 "directories by path, so the state directory's parents must be traversable by {}",
                 describe(uid_range_));
  create_state_dir(options_.state_dir);
  // Only the server walks these paths when it stages (staging.h); else the
  // sandbox user must traverse them (not list them) to bind its directory.
  if (root_ && !stages()) chmod(options_.state_dir.c_str(), 0711);
  make_dir(options_.state_dir / "sandboxes", root_ && !stages() ? 0711 : 0700);
  layout_.root = options_.state_dir;
  make_dir(options_.state_dir / "snapshots", 0700);
  make_dir(options_.state_dir / "locks", 0700);
  disks_ = start_disks(options_.disk, layout_, root_ && stages());  // mounted before recovery reads them
  log_limits(cgroups_, options_.limits, *disks_, options_.network_host);
  open_catalog();
  agent_copy_.emplace(options_.agent_binary.empty() ? default_agent() : options_.agent_binary, options_.state_dir);
  agent_binary_ = agent_copy_->path();  // by fd from a copy mountinfo does not name (bwrap_plan.h AgentCopy)
  agent_fd_ = open(agent_binary_.c_str(), O_PATH | O_CLOEXEC);
  if (agent_fd_ < 0)
    throw SandboxError(codes::kSandboxStartFailed, errno_message("cannot open the agent " + agent_binary_.string(), errno));
  remove_stale_cgroups();
  idle_thread_ = std::thread([this] { idle_main(); });
  if (options_.spare != ManagerOptions::Spare::None) {
    if (access("/bin/sh", X_OK) != 0) {
      spdlog::warn("no /bin/sh: sandboxes are not prepared ahead (each new conversation starts from scratch)");
      options_.spare = ManagerOptions::Spare::None;
    } else {
      spare_wanted_ = true;
      spare_thread_ = std::thread([this] { spare_main(); });
    }
  }
}

Manager::~Manager() {
  shutdown();
  close(agent_fd_);
}

std::size_t Manager::running() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [conversation, s] : sandboxes_) n += s->state() == "active";
  return n;
}

Lease Manager::acquire(const std::string& conversation, const ProgressFn& progress) {
  auto sandbox = entry(conversation, /*claim_spare=*/true);
  std::lock_guard life(sandbox->lifecycle_);
  std::string notice;
  if (!sandbox->running()) {
    take_lock(*sandbox);
    auto record = catalog_->find_sandbox(sandbox->id());
    if (!record || record->state == "destroying") {
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
    if (record->state == "stopped" || record->state == "clearing") {
      notice = resume_stopped(*sandbox, *record, progress);
    } else if (died) {
      std::string reason = client->death_reason();
      notice = "this conversation's sandbox had stopped (" + (reason.empty() ? "unknown reason" : reason) +
               ") and was restarted: running processes are gone and sessions are back as last saved; "
               "files in /workspace and /home/user are kept";
    }
    start_agent(*sandbox);
    bring_back(*sandbox, *record);
  }
  std::lock_guard slock(sandbox->mutex_);
  if (!sandbox->kept_live_.empty()) notice += (notice.empty() ? "" : "; ") + std::exchange(sandbox->kept_live_, "");
  ++sandbox->in_use_;
  sandbox->last_used_ = std::chrono::steady_clock::now();
  return Lease(sandbox, notice);
}

std::optional<Lease> Manager::try_acquire(const std::string& conversation) {
  std::shared_ptr<Sandbox> sandbox;
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

std::shared_ptr<Sandbox> Manager::find(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(conversation);
  return it == sandboxes_.end() ? nullptr : it->second;
}

void Manager::prepare_dirs(const SandboxDirs& d, const BwrapOptions& plan) {
  disks_->ensure(d.root);  // its own filesystem first (disk.h)
  DirsSetup setup;  // by descriptor, following no symlink (host_dirs.h)
  setup.root_mode = root_ && !stages() ? 0711 : 0700;
  setup.owner = d.owner;  // as root, the sandbox's own host ids (manager_uids.cpp)
  setup.etc_files = generated_etc_files(plan);
  prepare_sandbox_dirs(d, setup);
}

BwrapOptions Manager::plan_for(const SandboxDirs& dirs) const {
  BwrapOptions plan;
  plan.bwrap = options_.bwrap;
  plan.dirs = dirs;
  plan.state_dir = options_.state_dir;
  plan.network_host = options_.network_host;
  plan.agent_binary = agent_binary_;
  plan.agent_fd = kAgentFdInBwrap;
  plan.tmpfs_bytes = options_.limits.tmpfs_bytes;
  if (stages()) plan.staged_dir = kStagingDir;
  return plan;
}

LaunchSpec Manager::launch_spec(BwrapOptions plan, const Cgroup* cgroup) const {
  plan.agent_args = options_.agent_args;
  auto limit_args = agent_limit_args(options_.limits, cgroup && cgroup->limits_memory());
  plan.agent_args.insert(plan.agent_args.end(), limit_args.begin(), limit_args.end());
  if (disk_usage(plan.dirs.root))  // file calls name the limit when it is full
    plan.agent_args.insert(plan.agent_args.end(), {"--workspace-limit", limit_text(*disks_)});
  LaunchSpec spec;
  spec.argv = bwrap_argv(plan);
  spec.env = sandbox_environment(plan);
  if (cgroup) spec.cgroup_procs = cgroup->procs_files();
  spec.drop_to = plan.dirs.owner;  // none unless root
  if (stages()) spec.staging.emplace(plan.dirs.root, agent_binary_);  // the plan binds from kStagingDir
  else spec.agent_fd = agent_fd_;
  return spec;
}

std::size_t Manager::running_locked(const Sandbox& starting) const {
  std::size_t running = 0;
  for (const auto& [conversation, s] : sandboxes_) {
    if (s.get() == &starting) continue;
    std::string state = s->state();
    running += state == "active" || state == "starting";
  }
  return running;
}

std::shared_ptr<Sandbox> Manager::pick_eviction_locked(const Sandbox& starting) {
  std::shared_ptr<Sandbox> oldest;
  for (const auto& [conversation, s] : sandboxes_) {
    if (s.get() == &starting || s->state() != "active") continue;
    std::lock_guard lock(s->mutex_);
    if (s->in_use_ == 0 && (!oldest || s->last_used_ < oldest->last_used_)) oldest = s;
  }
  if (running_locked(starting) < options_.max_sandboxes || !oldest) return nullptr;
  spdlog::info("sandbox {} ({}) stopped to make room: at most {} run at once", oldest->id(), oldest->conversation(),
               options_.max_sandboxes);
  return oldest;
}

void Manager::start_agent(Sandbox& sandbox_ref) {
  Sandbox* sandbox = &sandbox_ref;
  {
    std::lock_guard lock(spare_mutex_);
    ++starting_;
  }
  struct EndPhase {
    Manager& m;
    Sandbox& s;
    ~EndPhase() {
      {
        std::lock_guard slock(s.mutex_);
        if (s.phase_ == "starting") s.phase_.clear();
      }
      // The spare is replaced once no start is in progress (it would compete
      // with this one for the CPU).
      std::lock_guard lock(m.spare_mutex_);
      if (--m.starting_ == 0 && m.options_.spare != ManagerOptions::Spare::None && !m.spare_) {
        m.spare_wanted_ = true;
        m.spare_wake_.notify_all();
      }
    }
  } end_phase{*this, *sandbox};
  // mutex_ is held only to pick a sandbox to evict and to mark this one
  // "starting" (counted against max_sandboxes): a slow start must not hold up
  // other conversations. lifecycle_, held by the caller, makes a second call
  // for this conversation wait for this start.
  std::shared_ptr<Sandbox> evicted;
  std::unique_ptr<PreparedSandbox> warm_spare;  // dropped to make room
  {
    std::lock_guard lock(mutex_);
    std::lock_guard spare_lock(spare_mutex_);
    // A warm spare counts toward max_sandboxes, and goes first.
    bool warm = spare_ && spare_->warm;
    if (warm && running_locked(*sandbox) + 1 >= options_.max_sandboxes) warm_spare = std::move(spare_);
    evicted = pick_eviction_locked(*sandbox);
    std::lock_guard slock(sandbox->mutex_);
    sandbox->phase_ = "starting";
  }
  warm_spare.reset();
  if (evicted) evict(*evicted);
  stop(*sandbox);  // what a dead agent left (its cgroup)

  std::unique_ptr<PreparedSandbox> prepared;
  {
    std::lock_guard slock(sandbox->mutex_);
    prepared = std::move(sandbox->prepared_);
  }
  if (prepared && (prepared->id != sandbox->id_ || !prepared->client || !prepared->client->alive())) {
    spdlog::info("sandbox {}: its prepared launcher is gone; starting from scratch", sandbox->id_);
    prepared->claimed = true;  // the directories are this conversation's
    prepared.reset();
  }
  std::shared_ptr<AgentClient> client;
  if (prepared) {
    // Directories, cgroup and the launcher's cgroup join were done ahead.
    {
      std::lock_guard slock(sandbox->mutex_);
      sandbox->cgroup_ = std::move(prepared->cgroup);
    }
    client = std::move(prepared->client);
    if (!prepared->warm) {
      prepared->release_gate();
      client->await_hello(options_.start_timeout);
    }
    spdlog::debug("sandbox {}: started from a {} spare", sandbox->id_, prepared->warm ? "warm" : "prepared");
  } else {
    assign_owner(sandbox->id_, sandbox->dirs_);
    BwrapOptions plan = plan_for(sandbox->dirs_);
    prepare_dirs(sandbox->dirs_, plan);
    std::string why;
    auto cgroup = Cgroup::create(cgroups_, "sandbox-" + sandbox->id_, options_.limits, why);
    if (!cgroup && cgroups_.writable) spdlog::warn("sandbox {}: no cgroup ({})", sandbox->id_, why);
    LaunchSpec spec = launch_spec(plan, cgroup.get());
    {
      std::lock_guard slock(sandbox->mutex_);
      sandbox->cgroup_ = std::move(cgroup);
    }
    spdlog::debug("sandbox {}: {}", sandbox->id_, printable_command(spec.argv));
    client = AgentClient::attach([spec = std::move(spec)] { return launch(spec); }, sandbox->id_);
    client->await_hello(options_.start_timeout);
  }
  {
    std::lock_guard slock(sandbox->mutex_);
    sandbox->previous_client_ = std::move(sandbox->client_);
    sandbox->client_ = std::move(client);
  }
  spdlog::info("sandbox {} started for conversation '{}'", sandbox->id_, sandbox->conversation_);
}

PreparedSandbox::~PreparedSandbox() {
  if (gate >= 0) close(gate);  // EOF: a launcher still at the gate exits without starting bwrap
  if (claimed) return;
  if (client) client->stop();
  cgroup.reset();
  std::error_code ec;
  if (disks && !dirs.root.empty()) disks->drop_quietly(dirs.root);
  if (!dirs.root.empty()) persistence::remove_tree(dirs.root);
  if (release_owner && !dirs.root.empty() && fs::symlink_status(dirs.root, ec).type() == fs::file_type::not_found)
    release_owner();
  // lock is released last (member destructor): recovery by another server
  // removes directories only of sandboxes whose lock it can take.
}

// How long the spare's replacement waits after the last start ended.
constexpr std::chrono::milliseconds kSpareDelay{50};

std::unique_ptr<PreparedSandbox> Manager::build_spare(bool warm) {
  auto p = std::make_unique<PreparedSandbox>();
  p->id = persistence::random_hex(12);
  p->dirs.root = layout_.sandbox(p->id);
  p->disks = disks_.get();
  // The lock first: another server's recovery leaves a directory alone while
  // its lock is held, and removes it after a crash.
  if (!persistence::SandboxLock::acquire(layout_.lock(p->id), std::chrono::milliseconds(0), p->lock))
    throw SandboxError(codes::kSandboxStartFailed, "the lock of a fresh sandbox id is taken");
  assign_spare_owner(*p);  // its uid when it is prepared, given back if it is discarded
  BwrapOptions plan = plan_for(p->dirs);
  prepare_dirs(p->dirs, plan);
  std::string why;
  p->cgroup = Cgroup::create(cgroups_, "sandbox-" + p->id, options_.limits, why);
  if (!p->cgroup && cgroups_.writable) spdlog::warn("sandbox {}: no cgroup ({})", p->id, why);
  LaunchSpec spec = launch_spec(plan, p->cgroup.get());
  // The launcher joins the cgroup and drops privileges as any launch does,
  // then waits in a shell for a line on the gate before it execs bwrap (a
  // small process image instead of a copy of the server waiting).
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) throw SandboxError(codes::kSandboxStartFailed, errno_message("pipe", errno));
  std::string fd = std::to_string(kAgentFdInBwrap + 1);
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   "unset PWD; read -r go <&" + fd + " || exit 0; exec " + fd + "<&-; exec \"$@\"",
                                   "agentbox-launcher"};
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  spec.argv = std::move(argv);
  spec.gate_fd = gate[0];
  try {
    p->client = AgentClient::attach([spec = std::move(spec)] { return launch(spec); }, p->id);
  } catch (...) {
    close(gate[0]);
    close(gate[1]);
    throw;
  }
  close(gate[0]);
  p->gate = gate[1];
  if (warm) {
    p->release_gate();
    p->client->await_hello(options_.start_timeout);
    p->warm = true;
  }
  return p;
}

std::unique_ptr<PreparedSandbox> Manager::take_spare() {
  std::lock_guard lock(spare_mutex_);
  if (!spare_) return nullptr;
  auto p = std::move(spare_);
  if (!p->client || !p->client->alive()) {
    spdlog::warn("sandbox {}: the spare had ended ({}); starting from scratch", p->id,
                 p->client ? p->client->death_reason() : "no launcher");
    spare_wanted_ = starting_ == 0;
    spare_wake_.notify_all();
    return nullptr;  // destroyed here: its cgroup and directories go
  }
  return p;
}

std::string Manager::spare_state() {
  std::lock_guard lock(spare_mutex_);
  return !spare_ ? "none" : spare_->warm ? "warm" : "prepared";
}

void Manager::spare_main() {
  int failures = 0;
  for (;;) {
    bool warm;
    {
      std::unique_lock lock(spare_mutex_);
      spare_wake_.wait(lock, [this] { return spare_stopping_ || (spare_wanted_ && !spare_ && starting_ == 0); });
      if (spare_stopping_) return;
      // Not while the sandbox that just started runs its first command: the
      // build (a fork, an exec, a cgroup join) would compete with it.
      if (spare_wake_.wait_for(lock, kSpareDelay, [this] { return spare_stopping_ || starting_ > 0; })) {
        if (spare_stopping_) return;
        continue;  // another start began; wait for it to end
      }
      spare_wanted_ = false;
      warm = options_.spare == ManagerOptions::Spare::Warm;
    }
    // A warm spare counts toward max_sandboxes: only when there is room.
    if (warm && running() + 1 >= options_.max_sandboxes) warm = false;
    std::unique_ptr<PreparedSandbox> p;
    try {
      p = build_spare(warm);
      failures = 0;
    } catch (const std::exception& e) {
      spdlog::warn("could not prepare a sandbox ahead: {}", e.what());
      // Back off (a host that cannot start sandboxes says so on each call).
      std::unique_lock lock(spare_mutex_);
      auto wait = std::chrono::seconds(std::min(60, 1 << std::min(++failures, 6)));
      if (spare_wake_.wait_for(lock, wait, [this] { return spare_stopping_; })) return;
      spare_wanted_ = true;
      continue;
    }
    std::unique_lock lock(spare_mutex_);
    if (spare_stopping_) {
      lock.unlock();
      return;  // p is destroyed: nothing of it is left
    }
    spare_ = std::move(p);
  }
}

void Manager::stop_spare() {
  {
    std::lock_guard lock(spare_mutex_);
    spare_stopping_ = true;
  }
  spare_wake_.notify_all();
  if (spare_thread_.joinable() && spare_thread_.get_id() != std::this_thread::get_id()) spare_thread_.join();
  std::unique_ptr<PreparedSandbox> spare;
  {
    std::lock_guard lock(spare_mutex_);
    spare = std::move(spare_);
  }
}

void Manager::remove_stale_cgroups() {
  std::error_code ec;
  for (const auto& parent : cgroups_.parents) {
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind("sandbox-", 0) != 0) continue;
      // The parent may be shared with servers on other state directories
      // (whose locks are elsewhere): a young group may be one being set up,
      // empty until its launcher joins it.
      struct stat st{};
      if (stat(entry.path().c_str(), &st) != 0 || time(nullptr) - st.st_mtime < 60) continue;
      persistence::SandboxLock lock;
      try {
        if (!persistence::SandboxLock::acquire(layout_.lock(name.substr(8)), std::chrono::milliseconds(0), lock))
          continue;  // driven by another server
      } catch (const std::exception&) {
        continue;
      }
      // Fails (EBUSY) when processes are still inside; they are no server's.
      if (rmdir(entry.path().c_str()) == 0) spdlog::info("removed the stale cgroup {}", entry.path().string());
    }
  }
}

void Manager::evict(Sandbox& sandbox) {
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

void Manager::stop(Sandbox& sandbox) {
  std::shared_ptr<AgentClient> client;
  std::unique_ptr<Cgroup> cgroup;
  {
    std::lock_guard lock(sandbox.mutex_);
    client = sandbox.client_;
    cgroup = std::move(sandbox.cgroup_);
  }
  if (client) client->stop();
  cgroup.reset();  // kills stragglers and removes the group
}

}  // namespace agentbox::sandbox
