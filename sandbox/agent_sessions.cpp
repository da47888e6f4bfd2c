#include "sandbox/agent_sessions.h"

#include "os/errno_text.h"
#include "os/utf8.h"
#include "sandbox/agent_spawn.h"
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

namespace agentbox::sandbox {

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

int open_fifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST)
    throw SandboxError(codes::kInternal, os::errno_text("mkfifo " + path, errno));
  // Opened for reading before the shell opens it for writing, so the shell's
  // open never blocks; Linux reports no hang-up until a writer has come and gone.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("open " + path, errno));
  return fd;
}

}  // namespace

struct Sessions::Session {
  std::string name;
  std::string dir;
  std::mutex run;  // one command at a time; everything below is guarded by it
  Spawned shell;
  int control_fd = -1;  // the shell's stdin
  // The shell's stdout: "<exit code>\0<cwd>\0" when a command ends, then
  // "s\0" once its state is saved (the save runs after the reply).
  int report_fd = -1;
  std::string report_bytes;  // read but not yet consumed
  int saves_pending = 0;     // commands reported whose "s\0" has not been read
  unsigned seq = 0;
  std::string cwd;      // guarded by Sessions::mutex_
  bool deleted = false;  // guarded by Sessions::mutex_
  Clock::time_point last_used = Clock::now();  // guarded by run
};

// One exec in flight.
struct Sessions::Run {
  Run(std::size_t head, std::size_t tail) : out(head, tail), err(head, tail) {}
  std::string command;
  OutputBuffer out, err;
  int out_fd = -1, err_fd = -1, cancel_fd = -1;
  std::string report;
  bool reported = false, shell_died = false, timed_out = false, cancelled = false;
  int exit_code = 0;
  std::string signal;
  Clock::time_point started = Clock::now();
  // Streaming to the caller (progress notifications).
  bool stream = false;
  std::string pending_out, pending_err;
  std::uint64_t streamed = 0;
  Clock::time_point last_flush = Clock::now();
};

Sessions::Sessions(const AgentConfig& config, IoLoop& io, ProcessTable& processes)
    : config_(config), io_(io), processes_(processes) {
  mkdir((std::string(contract::kRuntimeDir) + "/s").c_str(), 0700);
  auto session = add("default", "/workspace", {});
  // The default shell starts now, while the server is still waiting for the
  // hello: a conversation's first exec then finds it ready instead of paying
  // bash's start-up on top of the sandbox's.
  try {
    start_shell(*session);
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

std::shared_ptr<Sessions::Session> Sessions::add(const std::string& name, const std::string& cwd,
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

std::shared_ptr<Sessions::Session> Sessions::get(const std::string& name) {
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

bool Sessions::read_report(Session& s, std::string& report) {
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

void Sessions::start_shell(Session& s) {
  int control[2], report[2];
  if (pipe2(control, O_CLOEXEC) != 0) throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));
  if (pipe2(report, O_CLOEXEC) != 0) {
    close(control[0]);
    close(control[1]);
    throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));
  }
  SpawnSpec spec;
  spec.argv = {"/bin/bash", "--noprofile", "--norc"};
  spec.env = config_.environment;
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

void Sessions::stop_shell(Session& s) {
  if (s.shell.reaper > 0) kill_tree(s.shell.reaper);
  for (int* fd : {&s.control_fd, &s.report_fd, &s.shell.status_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  s.shell = Spawned{};
  s.report_bytes.clear();
  s.saves_pending = 0;
}

namespace {

constexpr std::size_t kStreamChunk = 8 * 1024;
constexpr std::uint64_t kStreamLimit = 1 << 20;  // progress messages are a preview, not the output
constexpr auto kStreamInterval = std::chrono::milliseconds(100);

void flush_stream(AgentRequest& request, std::string& pending, const char* name,
                  std::uint64_t& streamed) {
  if (pending.empty()) return;
  std::string chunk(os::utf8_prefix(pending, kStreamChunk));
  if (chunk.empty()) chunk = pending.substr(0, kStreamChunk);
  streamed += chunk.size();
  request.notify("output", {{"stream", name}, {"data", chunk}, {"bytes", streamed}});
  pending.erase(0, chunk.size());
}

// Reads what is available on a non-blocking fd into the run's buffer.
// Returns false at EOF.
bool pump(int fd, OutputBuffer& buffer, std::string* pending, std::size_t max_bytes) {
  char chunk[64 * 1024];
  std::size_t total = 0;
  while (total < max_bytes) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buffer.append(std::string_view(chunk, static_cast<std::size_t>(n)));
      if (pending && pending->size() < kStreamLimit) pending->append(chunk, static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return !(n == 0);
  }
  return true;
}

}  // namespace

json Sessions::exec(AgentRequest& request) {
  const json& params = request.params();
  std::string command = require_string(params, "command");
  auto timeout = std::chrono::milliseconds(std::max<std::int64_t>(1, param_int(params, "timeout_ms", contract::kDefaultTimeoutMs)));
  auto env = param_env(params);
  auto s = get(param_string(params, "session", "default"));

  std::unique_lock run_lock(s->run);
  {
    std::lock_guard lock(mutex_);
    if (s->deleted) throw SandboxError(codes::kSessionNotFound, "session '" + s->name + "' was deleted");
  }
  std::string cwd_override;
  if (params.contains("cwd") && params["cwd"].is_string()) {
    std::string base;
    {
      std::lock_guard lock(mutex_);
      base = s->cwd;
    }
    cwd_override = resolve_path(base, params["cwd"].get<std::string>());
    struct stat st;
    if (stat(cwd_override.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw SandboxError(codes::kInvalidCwd,
                         "working directory '" + cwd_override + "' does not exist or is not a directory" +
                             (params["cwd"].get<std::string>().rfind('/', 0) != 0
                                  ? " (a relative cwd resolves against the session's cwd " + base + ")"
                                  : ""));
  }
  if (s->shell.reaper <= 0) start_shell(*s);
  struct Touch {
    Session& s;
    ~Touch() { s.last_used = Clock::now(); }  // idle counts from the end of the command
  } touch{*s};

  Run run(config_.process_head_bytes, config_.process_tail_bytes);
  run.command = command;
  run.stream = params.value("stream", false);
  std::string n = std::to_string(++s->seq);
  std::string cmd_file = s->dir + "/c" + n, in_file = s->dir + "/i" + n;
  std::string out_file = s->dir + "/o" + n, err_file = s->dir + "/e" + n;
  // A trailing newline lets a heredoc terminator sit on the last line.
  write_text_file(cmd_file, command + "\n");
  std::string stdin_source = "/dev/null";
  if (params.contains("stdin") && params["stdin"].is_string()) {
    write_text_file(in_file, params["stdin"].get<std::string>());
    stdin_source = in_file;
  }
  run.out_fd = open_fifo(out_file);
  run.err_fd = open_fifo(err_file);
  run.cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

  std::string assignments;
  for (const auto& [key, value] : env) assignments += key + "=" + shell_quote(value) + " ";
  // bash reads a pipe one byte per read(2) (it must not consume what a
  // command after this line would read), so the line names its files
  // relative to the session's directory, $__ab_dir, to stay short.
  auto in_dir = [&n](char kind) { return "\"$__ab_dir/" + std::string(1, kind) + n + "\""; };
  std::string body = assignments + ". " + in_dir('c');
  std::string redirect = " <" + (stdin_source == in_file ? in_dir('i') : stdin_source) + " >" + in_dir('o') +
                         " 2>" + in_dir('e');
  std::string line;
  if (cwd_override.empty()) {
    line = "{ " + body + "; }" + redirect + "; __ab_done $?\n";
  } else {
    // cwd given to one exec applies to that command only.
    line = "__ab_pwd=$PWD; { builtin cd -- " + shell_quote(cwd_override) + " && " + body + "; }" + redirect +
           "; __ab_rc=$?; builtin cd -- \"$__ab_pwd\"; __ab_done $__ab_rc\n";
  }
  int cancel_fd = run.cancel_fd;
  request.on_cancel([cancel_fd] {
    std::uint64_t one = 1;
    (void)!::write(cancel_fd, &one, sizeof one);
  });
  // A write error means the shell is gone; its status pipe then says how it ended.
  rpc::write_all(s->control_fd, line);

  auto deadline = run.started + timeout;
  // A stream at its end stays readable (POLLHUP): it leaves the poll set, or
  // the loop would spin while the shell is still writing its report.
  bool report_open = true, out_open = true, err_open = true;
  while (!run.reported && !run.shell_died) {
    auto now = Clock::now();
    if (now >= deadline) {
      run.timed_out = true;
      break;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (run.stream) wait = std::min<std::chrono::milliseconds>(wait, kStreamInterval);
    // The shell's end is watched on the reaper's status pipe, not on EOF of
    // the report pipe: after `exec prog` the command still runs though the
    // shell (and its report pipe) is gone.
    pollfd fds[5] = {{report_open ? s->report_fd : -1, POLLIN, 0}, {out_open ? run.out_fd : -1, POLLIN, 0},
                     {err_open ? run.err_fd : -1, POLLIN, 0},
                     {run.cancel_fd, POLLIN, 0}, {s->shell.status_fd, POLLIN, 0}};
    int ready = poll(fds, 5, static_cast<int>(wait.count()) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents) out_open = pump(run.out_fd, run.out, run.stream ? &run.pending_out : nullptr, 1 << 20);
    if (fds[2].revents) err_open = pump(run.err_fd, run.err, run.stream ? &run.pending_err : nullptr, 1 << 20);
    if (fds[3].revents) {
      run.cancelled = true;
      break;
    }
    if (fds[0].revents) {
      report_open = read_report(*s, run.report);
      run.reported = std::count(run.report.begin(), run.report.end(), '\0') >= 2;
    }
    if (fds[4].revents && !run.reported) {
      int status = read_wait_status(s->shell.status_fd);
      run.shell_died = true;
      if (status >= 0 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
      if (status >= 0 && WIFSIGNALED(status)) {
        run.exit_code = 128 + WTERMSIG(status);
        run.signal = signal_name(WTERMSIG(status));
      }
    }
    if (run.stream && Clock::now() - run.last_flush >= kStreamInterval) {
      flush_stream(request, run.pending_out, "stdout", run.streamed);
      flush_stream(request, run.pending_err, "stderr", run.streamed);
      run.last_flush = Clock::now();
    }
  }
  return finish(*s, run);
}

json Sessions::finish(Session& s, Run& run) {
  bool killed = run.timed_out || run.cancelled;
  if (killed) kill_tree(s.shell.reaper);
  if (run.shell_died || killed) {
    // The shell is gone (or killed on purpose): drop the rest of its tree
    // and let the next command start a fresh one.
    stop_shell(s);
  } else {
    std::size_t nul = run.report.find('\0');
    run.exit_code = std::atoi(run.report.substr(0, nul).c_str());
    std::string cwd = run.report.substr(nul + 1, run.report.find('\0', nul + 1) - nul - 1);
    std::lock_guard lock(mutex_);
    s.cwd = cwd;
  }
  // Everything the command wrote before it ended is already in the FIFOs.
  bool out_open = pump(run.out_fd, run.out, nullptr, 16 << 20);
  bool err_open = pump(run.err_fd, run.err, nullptr, 16 << 20);
  // What is still pending goes in the reply only: a notification right before
  // the reply is one a client may drop (docs/protocol.md, "Progress").
  // Background jobs may still hold the FIFOs: keep them drained.
  if (out_open) io_.drain(run.out_fd); else close(run.out_fd);
  if (err_open) io_.drain(run.err_fd); else close(run.err_fd);
  close(run.cancel_fd);
  std::string n = std::to_string(s.seq);
  for (const char* prefix : {"/c", "/i", "/o", "/e"}) unlink((s.dir + prefix + n).c_str());

  if (run.timed_out) run.exit_code = 124;
  if (run.cancelled) run.exit_code = 130;
  if (!killed && run.signal.empty() && run.exit_code > 128 && run.exit_code < 128 + 65) {
    // The shell reports a command killed by signal N as 128+N.
    std::string name = signal_name(run.exit_code - 128);
    if (name.rfind("SIG", 0) == 0 && std::isalpha(static_cast<unsigned char>(name[3]))) run.signal = name;
  }
  auto duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - run.started);
  // Budgets are shown_cost (text and structuredContent together) and lines.
  auto [out_budget, err_budget] = split_budget(cost_bound(run.out.total()), cost_bound(run.err.total()), config_.inline_output_chars);
  auto [out_lines, err_lines] = split_budget(run.out.lines() + 1, run.err.lines() + 1, kMaxShownLines);
  auto out = run.out.inline_view(out_budget, out_lines);
  auto err = run.err.inline_view(err_budget, err_lines);
  bool truncated = out.truncated || err.truncated;
  std::string id;
  if (truncated) id = processes_.reserve_exec_id();
  json result = {
      {"exit_code", run.exit_code},   {"stdout", out.text},
      {"stderr", err.text},           {"success", run.exit_code == 0 && !killed},
      {"timed_out", run.timed_out},   {"duration_ms", duration.count()},
      {"truncated", truncated},       {"session", s.name},
      {"stdout_bytes", run.out.total()}, {"stderr_bytes", run.err.total()},
  };
  if (run.cancelled) result["cancelled"] = true;
  if (!run.signal.empty()) result["signal"] = run.signal;
  if (run.timed_out) {
    result["notice"] = "the command did not finish within the timeout and was killed with its whole process tree; "
                       "the session was restored to its state after the previous command";
  } else if (run.shell_died) {
    result["notice"] = "the command ended the session's shell (exit code " + std::to_string(run.exit_code) +
                       "); the next command starts a fresh shell with the state saved after the previous command";
  }
  if (truncated) {
    result["process_id"] = id;
    result["next_offset"] = out.cut_from;  // where process_output pages on: the first byte not shown
    result["stderr_next_offset"] = err.cut_from;
    processes_.add_exec_output(id, run.command, std::move(run.out), std::move(run.err), run.exit_code);
  }
  return result;
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
  table["session.create"] = [&sessions](AgentRequest& r) { return sessions.create(r.params()); };
  table["session.list"] = [&sessions](AgentRequest&) { return sessions.list(); };
  table["session.delete"] = [&sessions](AgentRequest& r) { return sessions.remove(r.params()); };
  table["session.export"] = [&sessions](AgentRequest&) { return sessions.export_state(); };
  table["session.import"] = [&sessions](AgentRequest& r) { return sessions.import_state(r.params()); };
  table["exec"] = [&sessions](AgentRequest& r) { return sessions.exec(r); };
}

}  // namespace agentbox::sandbox
