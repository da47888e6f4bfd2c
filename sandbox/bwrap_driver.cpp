#include "sandbox/bwrap_driver.h"

#include "contract/agent_methods.h"
#include "network/ca.h"
#include "os/errno_text.h"
#include "persistence/sandbox_lock.h"
#include "sandbox/disk_owner.h"
#include "sandbox/freezer.h"
#include "sandbox/host_dirs.h"
#include "sandbox/limits_report.h"
#include "sandbox/net_namespace.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

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

// One bwrap sandbox: its agent's client, its cgroup and, while held, the
// gate its launcher waits on.
class BwrapBox final : public Box {
 public:
  BwrapBox(const CgroupSupport& support, std::unique_ptr<Cgroup> cgroup, const std::string& name)
      : cgroup_(std::move(cgroup)), freezer_(std::make_unique<Freezer>(support, cgroup_.get(), name)) {}
  ~BwrapBox() override {
    if (gate_ >= 0) close(gate_);  // EOF: a launcher still at the gate exits without starting bwrap
    stop();
  }
  std::shared_ptr<AgentClient> agent() const override { return client_; }
  void release() override;
  // A frozen box is thawed first: a v1-frozen process does not die of SIGKILL.
  void stop() override {
    if (freezer_ && freezer_->frozen()) freezer_->thaw();
    if (client_) client_->stop();
    cgroup_.reset();  // kills stragglers and removes the group
    freezer_.reset();
  }
  FreezeResult freeze() override;
  FreezeResult thaw() override;
  double cpu_quota() const override { return cgroup_ ? cgroup_->cpu_quota() : 0; }
  bool limits_memory() const override { return cgroup_ && cgroup_->limits_memory(); }
  bool limits_pids() const override { return cgroup_ && cgroup_->limits_pids(); }
  os::UniqueFd listen_inside(std::uint16_t port) override {
    if (!client_ || !client_->alive()) throw SandboxError(codes::kSandboxFailed, "the box has ended");
    return sandbox::listen_inside(first_inside(client_->pid()), port);
  }
  std::vector<os::UniqueFd> sockets_inside(std::size_t count) override {
    if (!client_ || !client_->alive()) throw SandboxError(codes::kSandboxFailed, "the box has ended");
    return sandbox::sockets_inside(first_inside(client_->pid()), count);
  }

  std::shared_ptr<AgentClient> client_;
  int gate_ = -1;  // write end: a line releases the launcher, EOF ends it

 private:
  std::unique_ptr<Cgroup> cgroup_;
  std::unique_ptr<Freezer> freezer_;  // after cgroup_: it reads the group
  bool stopped_by_agent_ = false;      // frozen with SIGSTOP by the agent, not the freezer
};

// The cgroup freezer where the host has one for the box; else the agent
// stops the box's processes itself (agent/freeze.h).
FreezeResult BwrapBox::freeze() {
  if (!freezer_) return {false, "the box is stopped", ""};
  FreezeResult result = freezer_->freeze();
  if (result.done) {
    result.method = "cgroup freezer";
    return result;
  }
  if (result.why.rfind("not supported here", 0) != 0 || !client_ || !client_->alive()) return result;
  try {
    client_->call(contract::methods::kBoxFreeze, json::object(), std::chrono::seconds(5));
  } catch (const std::exception& e) {
    return {false, result.why + "; stopping its processes from inside failed too: " + e.what(), ""};
  }
  stopped_by_agent_ = true;
  return {true, "", "SIGSTOP"};
}

FreezeResult BwrapBox::thaw() {
  if (!freezer_) return {false, "the box is stopped", ""};
  if (!stopped_by_agent_) return freezer_->thaw();
  try {
    client_->call(contract::methods::kBoxThaw, json::object(), std::chrono::seconds(5));
  } catch (const std::exception& e) {
    return {false, std::string("the agent could not continue the box's processes: ") + e.what(), ""};
  }
  stopped_by_agent_ = false;
  return {true, "", "SIGSTOP"};
}

void BwrapBox::release() {
  if (gate_ < 0) return;
  // A launcher that died leaves no reader: EPIPE, not a SIGPIPE that would
  // end a process that does not ignore it (tests, benches; serve does).
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  if (write(gate_, "\n", 1) < 0 && errno == EPIPE && !sigismember(&old, SIGPIPE)) {
    timespec now{0, 0};
    sigtimedwait(&pipe_signal, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(gate_);
  gate_ = -1;
}

std::vector<fs::path> entries(const fs::path& dir, const std::string& prefix = "", const std::string& suffix = "") {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(entry.path());
  }
  return out;
}

// The host's system bundle (Debian's, then Fedora's) with the agentbox CA
// after it: a box trusts what the host does, and the CA for the hosts the
// proxy intercepts.
std::shared_ptr<const CaTrust> ca_trust(const network::CertificateAuthority& ca) {
  auto trust = std::make_shared<CaTrust>();
  trust->certificate = ca.certificate_pem();
  for (const char* system : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}) {
    std::ifstream in(system, std::ios::binary);
    if (!in) continue;
    trust->bundle.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!trust->bundle.empty() && trust->bundle.back() != '\n') trust->bundle += '\n';
    break;
  }
  if (trust->bundle.empty()) spdlog::warn("no system CA bundle found: boxes trust the agentbox CA alone");
  trust->bundle += trust->certificate;
  return trust;
}

}  // namespace

std::unique_ptr<Driver> make_driver(const ManagerOptions& options, const persistence::StateLayout& layout,
                                    const std::string& sandbox_user) {
  return std::make_unique<BwrapDriver>(options, layout, sandbox_user);
}

BwrapDriver::BwrapDriver(const ManagerOptions& options, persistence::StateLayout layout,
                         const std::string& sandbox_user)
    : options_(options), layout_(std::move(layout)), root_(geteuid() == 0) {
  cgroups_ = detect_cgroups();
  if (root_ && !stages())
    spdlog::warn("this root server may not make mount namespaces (no CAP_SYS_ADMIN?): sandboxes bind their "
                 "directories by path, so the state directory's parents must be traversable by {}",
                 sandbox_user);
  // Only the server walks these paths when it stages (staging.h); else the
  // sandbox user must traverse them (not list them) to bind its directory.
  if (root_ && !stages()) chmod(options_.state_dir.c_str(), 0711);
  make_state_subdir(layout_.sandboxes(), root_ && !stages() ? 0711 : 0700);
  disks_ = start_disks(options_.disk, layout_, root_ && stages());  // mounted before recovery reads them
  parking_ = std::make_unique<DriverParking>(layout_, *disks_);
  log_limits(cgroups_, options_.limits, *disks_, options_.network_host);
  agent_copy_.emplace(options_.agent_binary.empty() ? default_agent() : options_.agent_binary, options_.state_dir);
  agent_binary_ = agent_copy_->path();  // by fd from a copy mountinfo does not name (bwrap_plan.h AgentCopy)
  agent_fd_ = open(agent_binary_.c_str(), O_PATH | O_CLOEXEC);
  if (agent_fd_ < 0)
    throw SandboxError(codes::kSandboxStartFailed, os::errno_text("cannot open the agent " + agent_binary_.string(), errno));
  if (options_.proxy && options_.proxy->authority()) ca_trust_ = ca_trust(*options_.proxy->authority());
}

BwrapDriver::~BwrapDriver() { close(agent_fd_); }

std::vector<fs::path> BwrapDriver::group_parents() const {
  std::vector<fs::path> parents = cgroups_.parents;
  if (fs::path freezer = v1_freezer_parent(); !freezer.empty()) parents.push_back(freezer);
  return parents;
}

std::optional<std::pair<unsigned, unsigned>> BwrapDriver::prepare_dirs(const SandboxDirs& d, const BwrapOptions& plan) {
  disks_->ensure(d.root);  // its own filesystem first (disk.h)
  // A fork's cloned disk keeps its source's ids (disk_owner.h).
  std::optional<std::pair<unsigned, unsigned>> on_disk;
  if (auto stored = read_disk_owner(d.root); stored && d.owner && *stored != *d.owner && stages()) on_disk = stored;
  DirsSetup setup;  // by descriptor, following no symlink (host_dirs.h)
  setup.root_mode = root_ && !stages() ? 0711 : 0700;
  setup.owner = on_disk ? on_disk : d.owner;  // as root, the sandbox's own host ids (manager_uids.cpp)
  setup.etc_files = generated_etc_files(plan);
  prepare_sandbox_dirs(d, setup);
  return on_disk;
}

BwrapOptions BwrapDriver::plan_for(const SandboxDirs& dirs) const {
  BwrapOptions plan;
  plan.bwrap = options_.bwrap;
  plan.dirs = dirs;
  plan.state_dir = options_.state_dir;
  plan.network_host = options_.network_host;
  if (options_.proxy) {
    plan.proxy_port = kProxyPortInside;
    plan.secret_variables = options_.network_policy->secret_variables();
    plan.ca_trust = ca_trust_;
  }
  plan.agent_binary = agent_binary_;
  plan.agent_fd = kAgentFdInBwrap;
  plan.tmpfs_bytes = options_.limits.tmpfs_bytes;
  if (stages()) plan.staged_dir = kStagingDir;
  return plan;
}

LaunchSpec BwrapDriver::launch_spec(BwrapOptions plan, const Cgroup* cgroup) const {
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

std::unique_ptr<Box> BwrapDriver::start(const std::string& id, const SandboxDirs& dirs, bool held) {
  BwrapOptions plan = plan_for(dirs);
  auto on_disk = prepare_dirs(dirs, plan);
  // A server killed while this box was frozen (a snapshot, a fork) left its
  // groups frozen: thawed, what is left of the old box ends (its agent's
  // stdin is closed) instead of waiting there, and a new freeze starts clean.
  for (const auto& parent : group_parents())
    if (thaw_left_frozen(parent / ("sandbox-" + id)))
      spdlog::warn("sandbox {}: thawed its cgroup, left frozen by a server that stopped mid-freeze", id);
  std::string why;
  auto cgroup = Cgroup::create(cgroups_, "sandbox-" + id, options_.limits, why);
  if (!cgroup && cgroups_.writable) spdlog::warn("sandbox {}: no cgroup ({})", id, why);
  LaunchSpec spec = launch_spec(plan, cgroup.get());
  if (on_disk && spec.staging) spec.staging->set_idmap(std::make_shared<os::UniqueFd>(idmap_userns(*on_disk, *dirs.owner)));
  auto box = std::make_unique<BwrapBox>(cgroups_, std::move(cgroup), "sandbox-" + id);
  if (!held) {
    spdlog::debug("sandbox {}: {}", id, printable_command(spec.argv));
    box->client_ = AgentClient::attach([spec = std::move(spec)] { return launch(spec); }, id);
    return box;
  }
  // The launcher joins the cgroup and drops privileges as any launch does,
  // then waits in a shell for a line on the gate before it execs bwrap (a
  // small process image instead of a copy of the server waiting).
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) throw SandboxError(codes::kSandboxStartFailed, os::errno_text("pipe", errno));
  std::string fd = std::to_string(kAgentFdInBwrap + 1);
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   "unset PWD; read -r go <&" + fd + " || exit 0; exec " + fd + "<&-; exec \"$@\"",
                                   "agentbox-launcher"};
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  spec.argv = std::move(argv);
  spec.gate_fd = gate[0];
  try {
    box->client_ = AgentClient::attach([spec = std::move(spec)] { return launch(spec); }, id);
  } catch (...) {
    close(gate[0]);
    close(gate[1]);
    throw;
  }
  close(gate[0]);
  box->gate_ = gate[1];
  return box;
}

void BwrapDriver::ensure_storage(const fs::path& root) { disks_->ensure(root); }
bool BwrapDriver::drop_storage(const fs::path& root) noexcept { return disks_->drop_quietly(root); }
void BwrapDriver::detach_storage(const fs::path& root) noexcept { disks_->unmount_quietly(root); }
std::string BwrapDriver::clone_support() const { return disks_->clone_why(); }
void BwrapDriver::clone_storage(const SandboxDirs& from, const std::vector<fs::path>& to_roots,
                                const std::function<void()>& on_frozen) {
  // The ids on this disk go with its clones (disk_owner.h).
  if (from.owner && !read_disk_owner(from.root)) write_disk_owner(from.root, *from.owner);
  disks_->clone(from.root, to_roots, on_frozen);
}
std::optional<std::pair<unsigned, unsigned>> BwrapDriver::storage_owner(const fs::path& root) const {
  return read_disk_owner(root);
}
void BwrapDriver::install_clone(const fs::path& root) { disks_->install(root); }
void BwrapDriver::flush_storage(const SandboxDirs& dirs) noexcept { flush_filesystem(dirs.root); }
void BwrapDriver::discard_clone(const fs::path& root) noexcept { disks_->discard(root); }
void BwrapDriver::detach_idle_storage() {
  disks_->unmount_idle(layout_.sandboxes(), [this](const std::string& id) { return layout_.lock(id); });
  disks_->release_pool();  // the last server out unmounts it (disk_pool.h)
}

// The workspace, home and tmp are host directories under the sandbox's: the
// snapshot store archives and unpacks them where they are.
persistence::SnapshotRecord BwrapDriver::export_workspace(persistence::SnapshotStore& store, const std::string& id,
                                                          const std::string& label, const std::string& reason,
                                                          const persistence::ArchiveProgressFn& progress) {
  return store.take(id, label, reason, progress);
}

persistence::ExtractResult BwrapDriver::import_workspace(persistence::SnapshotStore& store,
                                                         const persistence::SnapshotRecord& snapshot,
                                                         std::optional<std::pair<unsigned, unsigned>> owner,
                                                         const persistence::ArchiveProgressFn& progress) {
  return store.restore(snapshot, owner, progress);
}

Owned BwrapDriver::owned() const {
  Owned owned;
  owned.sandbox_dirs = entries(layout_.sandboxes());
  for (const auto& dir : owned.sandbox_dirs) {
    if (disk_usage(dir)) owned.mounts.push_back(dir);
    fs::path image = disks_->image(dir);
    if (fs::exists(image)) owned.disk_images.push_back(image);
  }
  for (const auto& parent : group_parents())
    for (auto& group : entries(parent, "sandbox-")) owned.cgroups.push_back(std::move(group));
  return owned;
}

void BwrapDriver::remove_stale() {
  for (const auto& group : owned().cgroups) {
    // The parent may be shared with servers on other state directories
    // (whose locks are elsewhere): a young group may be one being set up,
    // empty until its launcher joins it.
    struct stat st{};
    if (stat(group.c_str(), &st) != 0 || time(nullptr) - st.st_mtime < 60) continue;
    persistence::SandboxLock lock;
    try {
      std::string id = group.filename().string().substr(8);
      if (!persistence::SandboxLock::acquire(layout_.lock(id), std::chrono::milliseconds(0), lock))
        continue;  // driven by another server
    } catch (const std::exception&) {
      continue;
    }
    // A server killed during a snapshot leaves its box frozen: its
    // processes cannot even die of SIGKILL until thawed (they then see their
    // agent's stdin closed and end; the group goes at the next start).
    if (thaw_left_frozen(group)) spdlog::warn("thawed {}, left frozen by a server that stopped during a snapshot", group.string());
    // Fails (EBUSY) when processes are still inside; they are no server's.
    if (rmdir(group.c_str()) == 0) spdlog::info("removed the stale cgroup {}", group.string());
  }
}

}  // namespace agentbox::sandbox
