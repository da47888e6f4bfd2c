#include "agent/sessions.h"

#include "agent/exec.h"
#include "agent/session.h"
#include "os/errno_text.h"
#include "os/utf8.h"
#include "agent/spawn.h"
#include "rpc/framing.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <thread>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::agent {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Saves what makes a session: every ordinary variable (bash's own dynamic
// ones excluded), functions, aliases, umask, traps, shell options, then the
// cwd last.
// ${!a@} lists names by prefix without forking (compgen in $(...) would cost
// a fork per command). The file is on a tmpfs: an ext4 truncate costs ms here.
// bash line-buffers its output, so every line saved is a write(2): options
// are written only when they differ from a fresh shell's (about 90 lines
// saved per command), and one declare -p covers all variables.
constexpr const char* kShellRc = R"(shopt -s expand_aliases
__ab_opts="$BASHOPTS $SHELLOPTS"
__ab_save() {
  {
    builtin declare -f; builtin alias -p; builtin umask -p; builtin trap -p
    [[ "$BASHOPTS $SHELLOPTS" == "$__ab_opts" ]] || { builtin shopt -p; builtin set +o; }
    local __ab_n __ab_v=()
    for __ab_n in ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} \
        ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} \
        ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} \
        ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@}; do
      case $__ab_n in
        BASH*|FUNCNAME|PIPESTATUS|_|SHLVL|RANDOM|SRANDOM|SECONDS|LINENO|HISTCMD|EPOCH*|PPID|UID|EUID|GROUPS) ;;
        SHELLOPTS|DIRSTACK|COMP_*|__ab*|OPTIND|OPTERR|PWD) ;;
        *) __ab_v+=("$__ab_n") ;;
      esac
    done
    (( ${#__ab_v[@]} )) && builtin declare -p "${__ab_v[@]}"
    builtin printf 'builtin cd -- %q\n' "$PWD"
  } >"$__ab_dir/state" 2>/dev/null
}
__ab_done() { builtin printf '%s\0%s\0' "$1" "$PWD"; __ab_save; builtin printf 's\0'; }
)";

}  // namespace

Sessions::Sessions(const AgentConfig& config, IoLoop& io, ProcessTable& processes)
    : config_(config), io_(io), processes_(processes) {
  mkdir((std::string(contract::kRuntimeDir) + "/s").c_str(), 0700);
  auto session = add("default", "/workspace", {});
  // The default shell starts now, while the server is still waiting for the
  // hello: a conversation's first exec then finds it ready instead of paying
  // bash's start-up on top of the sandbox's.
  try {
    start_shell(*session, config_.environment);
  } catch (const SandboxError&) {
    // The first exec tries again and reports the reason.
  }
  if (config_.shell_idle.count() > 0) idle_thread_ = std::thread([this] { idle_loop(); });
}

Sessions::~Sessions() {
  if (idle_thread_.joinable()) {
    {
      std::lock_guard lock(idle_mutex_);
      stopping_ = true;
    }
    idle_wake_.notify_all();
    idle_thread_.join();
  }
  kill_all();
}

// A bash waiting for its next command is ~3 MB of RSS, most of a sandbox's
// (docs/sandbox.md, "Idle shells"). Its state is saved after every command,
// so a shell that has been idle for config_.shell_idle, has no save pending
// and has no process of its own (no job left running with &, no daemon
// re-parented to its reaper) is stopped; the next exec starts a fresh one
// from the saved state, exactly as after a timeout.
void Sessions::idle_loop() {
  auto period = std::clamp<std::chrono::milliseconds>(config_.shell_idle / 4, std::chrono::milliseconds(100),
                                                      std::chrono::seconds(15));
  std::unique_lock lock(idle_mutex_);
  while (!idle_wake_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    stop_idle_shells();
    lock.lock();
  }
}

void Sessions::stop_idle_shells() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, s] : sessions_) all.push_back(s);
  }
  for (const auto& s : all) {
    std::unique_lock run(s->run, std::try_to_lock);  // a session in use is not idle
    if (!run.owns_lock() || s->shell.reaper <= 0) continue;
    auto now = Clock::now();
    if (now - s->last_used < config_.shell_idle) continue;
    wait_for_saves(*s, now + std::chrono::milliseconds(100));
    if (s->saves_pending > 0) continue;
    auto tree = descendants(s->shell.reaper);
    if (tree.size() != 1 || tree.front() != s->shell.pid) continue;
    stop_shell(*s);
  }
}

std::shared_ptr<Session> Sessions::add(const std::string& name, const std::string& cwd,
                                                 const std::map<std::string, std::string>& env) {
  auto s = std::make_shared<Session>();
  s->name = name;
  s->cwd = cwd;
  {
    std::lock_guard lock(mutex_);
    if (sessions_.count(name)) throw SandboxError(codes::kSessionExists, "session '" + name + "' already exists");
    s->dir = std::string(contract::kRuntimeDir) + "/s/" + std::to_string(next_dir_++);
    sessions_[name] = s;
  }
  mkdir(s->dir.c_str(), 0700);
  write_text_file(s->dir + "/rc", std::string("__ab_dir=") + shell_quote(s->dir) + "\n" + kShellRc);
  // The first state: what session_create was given.
  std::string state;
  for (const auto& [key, value] : env) state += "export " + key + "=" + shell_quote(value) + "\n";
  state += "builtin cd -- " + shell_quote(cwd) + "\n";
  write_text_file(s->dir + "/state", state);
  return s;
}

std::shared_ptr<Session> Sessions::get(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(name);
  if (it == sessions_.end())
    throw SandboxError(codes::kSessionNotFound,
                       "no session '" + name + "' in this sandbox; create it with session_create or use 'default'");
  return it->second;
}

json Sessions::create(const json& params) {
  std::string name = param_string(params, "name", "");
  if (name.empty()) {
    std::lock_guard lock(mutex_);
    for (unsigned i = 1;; ++i) {
      name = "session-" + std::to_string(i);
      if (!sessions_.count(name)) break;
    }
  }
  if (name.size() > 64 || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos)
    throw SandboxError(codes::kInvalidArguments, "session names use letters, digits, '.', '_' and '-' (at most 64)");
  std::string cwd = resolve_path("/workspace", param_string(params, "cwd", "/workspace"));
  struct stat st;
  if (stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw SandboxError(codes::kInvalidCwd, "working directory '" + cwd + "' does not exist or is not a directory");
  add(name, cwd, param_env(params));
  return {{"session", name}, {"cwd", cwd}};
}

json Sessions::list() {
  std::lock_guard lock(mutex_);
  json list = json::array();
  for (const auto& [name, s] : sessions_) list.push_back({{"session", name}, {"cwd", s->cwd}});
  return {{"sessions", list}};
}

std::vector<std::string> Sessions::names() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, s] : sessions_) out.push_back(name);
  return out;
}

json Sessions::remove(const json& params) {
  std::string name = require_string(params, "session");
  if (name == "default") throw SandboxError(codes::kInvalidArguments, "the default session always exists and cannot be deleted");
  auto s = get(name);
  {
    std::lock_guard lock(mutex_);
    sessions_.erase(name);
    s->deleted = true;
  }
  // Kill first: a command still running in the session ends (and its exec
  // returns) before the lock below can be taken.
  if (s->shell.reaper > 0) kill_tree(s->shell.reaper);
  std::lock_guard run(s->run);
  stop_shell(*s);
  std::error_code ec;
  fs::remove_all(s->dir, ec);
  return {{"deleted", true}, {"session", name}};
}

json Sessions::export_state() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, s] : sessions_) all.push_back(s);
  }
  json list = json::array();
  for (const auto& s : all) {
    // The shell saves its state just after replying: wait for saves still
    // pending, unless a command is running (then the last save is the state
    // the session is restored to anyway).
    {
      std::unique_lock run(s->run, std::try_to_lock);
      if (run.owns_lock()) wait_for_saves(*s, Clock::now() + std::chrono::seconds(1));
    }
    // A save interrupted midway leaves a file without the final cd line: read
    // again a moment later.
    std::string state;
    for (int attempt = 0; attempt < 10; ++attempt) {
      std::ifstream in(s->dir + "/state", std::ios::binary);
      state.assign(std::istreambuf_iterator<char>(in), {});
      if (state.find("builtin cd -- ") != std::string::npos && !state.empty() && state.back() == '\n') break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lock(mutex_);
    list.push_back({{"session", s->name}, {"cwd", s->cwd}, {"state", state}});
  }
  return {{"sessions", list}};
}

json Sessions::import_state(const json& params) {
  if (!params.contains("sessions") || !params["sessions"].is_array())
    throw SandboxError(codes::kInvalidArguments, "session.import needs a sessions array");
  for (const auto& entry : params["sessions"]) {
    std::string name = require_string(entry, "session");
    std::string cwd = param_string(entry, "cwd", "/workspace");
    std::shared_ptr<Session> s;
    {
      std::lock_guard lock(mutex_);
      if (auto it = sessions_.find(name); it != sessions_.end()) s = it->second;
    }
    if (!s) s = add(name, cwd, {});
    std::lock_guard run(s->run);
    stop_shell(*s);  // the next command starts a shell from the imported state
    write_text_file(s->dir + "/state", param_string(entry, "state", "builtin cd -- " + shell_quote(cwd) + "\n"));
    std::lock_guard lock(mutex_);
    s->cwd = cwd;
  }
  return list();
}

SessionContext Sessions::context(const std::string& name) {
  auto s = get(name);
  std::lock_guard lock(mutex_);
  return {s->dir + "/state", s->cwd};
}

SessionContext Sessions::settled_context(const std::string& name) {
  auto s = get(name);
  // Queued behind a command running in the session, like a second exec.
  std::lock_guard run(s->run);
  wait_for_saves(*s, Clock::now() + std::chrono::seconds(5));
  std::lock_guard lock(mutex_);
  return {s->dir + "/state", s->cwd};
}

void Sessions::wait_for_saves(Session& s, Clock::time_point deadline) {
  while (s.saves_pending > 0 && s.report_fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd fd{s.report_fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&fd, 1, static_cast<int>(left.count())) <= 0) break;
    std::string ignored;
    if (!read_report(s, ignored)) break;
  }
}

bool read_report(Session& s, std::string& report) {
  char buf[4096];
  ssize_t got = read(s.report_fd, buf, sizeof buf);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (got <= 0) return false;
  s.report_bytes.append(buf, static_cast<std::size_t>(got));
  std::size_t start = 0, nul;
  while ((nul = s.report_bytes.find('\0', start)) != std::string::npos) {
    std::string_view token(s.report_bytes.data() + start, nul - start);
    if (token == "s") {
      --s.saves_pending;
    } else {
      // An exit code, then a cwd (always absolute, so never "s").
      report.append(token).push_back('\0');
      if (!token.empty() && token.front() == '/') ++s.saves_pending;
    }
    start = nul + 1;
  }
  s.report_bytes.erase(0, start);
  return true;
}

void start_shell(Session& s, const std::vector<std::string>& environment) {
  int control[2], report[2];
  if (pipe2(control, O_CLOEXEC) != 0) throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));
  if (pipe2(report, O_CLOEXEC) != 0) {
    close(control[0]);
    close(control[1]);
    throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));
  }
  SpawnSpec spec;
  spec.argv = {"/bin/bash", "--noprofile", "--norc"};
  spec.env = environment;
  spec.stdin_fd = control[0];
  spec.stdout_fd = report[1];
  try {
    s.shell = spawn_supervised(spec);
  } catch (...) {
    for (int fd : {control[0], control[1], report[0], report[1]}) close(fd);
    throw;
  }
  close(control[0]);
  close(report[1]);
  s.control_fd = control[1];
  s.report_fd = report[0];
  // The saved state restores cwd, variables and functions; errexit is not
  // restored, or every failing command would end the shell again.
  std::string boot = ". " + shell_quote(s.dir + "/rc") + "; . " + shell_quote(s.dir + "/state") +
                     " >/dev/null 2>&1; set +e\n";
  rpc::write_all(s.control_fd, boot);
}

void stop_shell(Session& s) {
  if (s.shell.reaper > 0) kill_tree(s.shell.reaper);
  for (int* fd : {&s.control_fd, &s.report_fd, &s.shell.status_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  s.shell = Spawned{};
  s.report_bytes.clear();
  s.saves_pending = 0;
}


json Sessions::exec(AgentRequest& request) {
  ExecRequest exec = parse_exec(request.params());
  auto s = get(param_string(request.params(), "session", "default"));
  return run_exec(request, exec, s, {config_, io_, processes_, mutex_});
}

void Sessions::kill_all() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, s] : sessions_) all.push_back(s);
  }
  for (const auto& s : all) {
    if (s->shell.reaper > 0) kill_tree(s->shell.reaper);
  }
}

void register_session_methods(MethodTable& table, Sessions& sessions) {
  table[contract::methods::kSessionCreate] = [&sessions](AgentRequest& r) { return sessions.create(r.params()); };
  table[contract::methods::kSessionList] = [&sessions](AgentRequest&) { return sessions.list(); };
  table[contract::methods::kSessionDelete] = [&sessions](AgentRequest& r) { return sessions.remove(r.params()); };
  table[contract::methods::kSessionExport] = [&sessions](AgentRequest&) { return sessions.export_state(); };
  table[contract::methods::kSessionImport] = [&sessions](AgentRequest& r) { return sessions.import_state(r.params()); };
  table[contract::methods::kExec] = [&sessions](AgentRequest& r) { return sessions.exec(r); };
}

}  // namespace agentbox::agent
