#include "sandbox/manager.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

std::string random_id() {
  std::random_device rd;
  std::uniform_int_distribution<int> hex(0, 15);
  std::string id;
  for (int i = 0; i < 12; ++i) id += "0123456789abcdef"[hex(rd)];
  return id;
}

void make_dir(const fs::path& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
    throw SandboxError(codes::kSandboxStartFailed, errno_message("cannot create " + dir.string(), errno));
  chmod(dir.c_str(), mode);
}

// Whether a user other than the owner can reach and run path (o+x on every
// parent, o+rx on the file): the sandbox user must, to start the agent.
bool reachable_by_others(const fs::path& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || (st.st_mode & 05) != 05) return false;
  for (fs::path p = path.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (stat(p.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
  }
  return true;
}

}  // namespace

std::string Sandbox::state() const {
  std::lock_guard lock(mutex_);
  if (client_ && client_->alive()) return "active";
  return client_ && !client_->stopped() ? "failed" : "stopped";
}

std::shared_ptr<AgentClient> Sandbox::client() const {
  std::lock_guard lock(mutex_);
  return client_;
}

std::uint64_t Sandbox::workspace_bytes() const {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dirs_.workspace(), fs::directory_options::skip_permission_denied, ec), end;
       it != end; it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += it->file_size(ec);
  }
  return total;
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
  spdlog::info("sandboxes: {}; network {}", cgroups_.detail, options_.network_host ? "host" : "none");
  fs::create_directories(options_.state_dir);
  // The sandbox user must traverse the state directory (not list it) to reach
  // its own directory when bwrap binds it.
  if (root_) chmod(options_.state_dir.c_str(), 0711);
  make_dir(options_.state_dir / "sandboxes", root_ ? 0711 : 0700);
  agent_binary_ = options_.agent_binary.empty() ? fs::read_symlink("/proc/self/exe") : options_.agent_binary;
  if (root_ && !reachable_by_others(agent_binary_)) {
    // bwrap runs as the sandbox user and must open the binary to bind it.
    fs::path copy = options_.state_dir / "bin" / "agentbox";
    make_dir(copy.parent_path(), 0711);
    fs::copy_file(agent_binary_, copy, fs::copy_options::overwrite_existing);
    chmod(copy.c_str(), 0755);
    agent_binary_ = copy;
  }
}

Manager::~Manager() { shutdown(); }

std::size_t Manager::running() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [conversation, s] : sandboxes_) n += s->state() == "active";
  return n;
}

Lease Manager::acquire(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(conversation);
  std::string notice;
  std::shared_ptr<Sandbox> sandbox;
  if (it != sandboxes_.end() && it->second->state() == "active") {
    sandbox = it->second;
  } else {
    std::shared_ptr<Sandbox> previous = it != sandboxes_.end() ? it->second : nullptr;
    if (previous) {
      auto client = previous->client();
      std::string reason = client ? client->death_reason() : "";
      notice = "this conversation's sandbox had stopped (" + (reason.empty() ? "unknown reason" : reason) +
               ") and was restarted: shell sessions, their variables and running processes are gone; "
               "files in /workspace and /home/user are kept";
    }
    sandbox = start_locked(conversation, previous);
  }
  std::lock_guard slock(sandbox->mutex_);
  ++sandbox->in_use_;
  sandbox->last_used_ = std::chrono::steady_clock::now();
  return Lease(sandbox, notice);
}

std::shared_ptr<Sandbox> Manager::find(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(conversation);
  return it == sandboxes_.end() ? nullptr : it->second;
}

void Manager::prepare_dirs(const Sandbox& sandbox, const BwrapOptions& plan) {
  const SandboxDirs& d = sandbox.dirs();
  make_dir(d.root, 0700);
  for (const auto& dir : {d.workspace(), d.home(), d.tmp()}) make_dir(dir, 0755);
  chmod(d.tmp().c_str(), 01777);
  make_dir(d.etc(), 0755);
  for (const auto& [name, content] : generated_etc_files(plan)) {
    std::ofstream out(d.etc() / name, std::ios::trunc);
    out << content;
    if (!out) throw SandboxError(codes::kSandboxStartFailed, "cannot write " + (d.etc() / name).string());
  }
  if (root_) {
    // The sandbox user owns its directories; the generated /etc stays root's.
    for (const auto& dir : {d.root, d.workspace(), d.home(), d.tmp()}) {
      if (chown(dir.c_str(), options_.sandbox_uid, options_.sandbox_gid) != 0)
        throw SandboxError(codes::kSandboxStartFailed, errno_message("chown " + dir.string(), errno));
    }
  }
}

void Manager::evict_if_full_locked() {
  std::size_t active = 0;
  std::shared_ptr<Sandbox> oldest;
  for (const auto& [conversation, s] : sandboxes_) {
    if (s->state() != "active") continue;
    ++active;
    std::lock_guard lock(s->mutex_);
    if (s->in_use_ == 0 && (!oldest || s->last_used_ < oldest->last_used_)) oldest = s;
  }
  if (active < options_.max_sandboxes || !oldest) return;
  spdlog::info("sandbox {} ({}) stopped to make room: at most {} run at once", oldest->id(), oldest->conversation(),
               options_.max_sandboxes);
  stop(*oldest);
}

std::shared_ptr<Sandbox> Manager::start_locked(const std::string& conversation, std::shared_ptr<Sandbox> previous) {
  evict_if_full_locked();
  auto sandbox = std::make_shared<Sandbox>();
  sandbox->conversation_ = conversation;
  sandbox->id_ = previous ? previous->id() : random_id();
  sandbox->dirs_.root = options_.state_dir / "sandboxes" / sandbox->id_;
  if (previous) stop(*previous);

  BwrapOptions plan;
  plan.bwrap = options_.bwrap;
  plan.dirs = sandbox->dirs_;
  plan.state_dir = options_.state_dir;
  plan.network_host = options_.network_host;
  plan.agent_binary = agent_binary_;
  prepare_dirs(*sandbox, plan);

  std::string why;
  sandbox->cgroup_ = Cgroup::create(cgroups_, "sandbox-" + sandbox->id_, options_.limits, why);
  if (!sandbox->cgroup_ && cgroups_.writable) spdlog::warn("sandbox {}: no cgroup ({})", sandbox->id_, why);
  plan.agent_args = options_.agent_args;
  auto limit_args = agent_limit_args(options_.limits, sandbox->cgroup_ && sandbox->cgroup_->limits_memory());
  plan.agent_args.insert(plan.agent_args.end(), limit_args.begin(), limit_args.end());

  LaunchSpec spec;
  spec.argv = bwrap_argv(plan);
  spec.env = sandbox_environment(plan);
  if (sandbox->cgroup_) spec.cgroup_procs = sandbox->cgroup_->procs_files();
  if (root_) spec.drop_to = std::make_pair(options_.sandbox_uid, options_.sandbox_gid);
  spec.name = sandbox->id_;
  spdlog::debug("sandbox {}: {}", sandbox->id_, printable_command(spec.argv));
  sandbox->client_ = AgentClient::start(std::move(spec), options_.start_timeout);
  sandboxes_[conversation] = sandbox;
  spdlog::info("sandbox {} started for conversation '{}'", sandbox->id_, conversation);
  return sandbox;
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

bool Manager::destroy(const std::string& conversation) {
  std::shared_ptr<Sandbox> sandbox;
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(conversation);
    if (it != sandboxes_.end()) {
      sandbox = it->second;
      sandboxes_.erase(it);
    }
  }
  if (!sandbox) return false;
  stop(*sandbox);
  std::error_code ec;
  fs::remove_all(sandbox->dirs().root, ec);
  if (ec) spdlog::warn("sandbox {}: cannot remove {}: {}", sandbox->id(), sandbox->dirs().root.string(), ec.message());
  return true;
}

void Manager::shutdown() {
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mutex_);
    all.swap(sandboxes_);
  }
  for (auto& [conversation, sandbox] : all) stop(*sandbox);
}

}  // namespace agentbox::sandbox
