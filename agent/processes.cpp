#include "agent/processes.h"

#include "agent/process_record.h"
#include "os/errno_text.h"
#include "agent/spawn.h"
#include "agent/services.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::agent {

using Clock = std::chrono::steady_clock;


namespace {

void set_exit(int wait_status, std::string& status, std::optional<int>& exit_code, std::string& signal) {
  if (WIFEXITED(wait_status)) {
    status = "exited";
    exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    status = "killed";
    exit_code = 128 + WTERMSIG(wait_status);
    signal = signal_name(WTERMSIG(wait_status));
  }
}

bool port_accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::string resolve_path(const std::string& cwd, const std::string& path) {
  if (path.empty()) return cwd;
  if (path[0] == '/') return path;
  return cwd + (cwd.size() > 1 ? "/" : "") + path;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool valid_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

void write_text_file(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("create " + path, errno));
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      throw SandboxError(codes::kInternal, os::errno_text("write " + path, err));
    }
    done += static_cast<std::size_t>(n);
  }
  close(fd);
}

ProcessTable::ProcessTable(IoLoop& io, const AgentConfig& config, SessionResolver resolve)
    : io_(io), config_(config), resolve_(std::move(resolve)), services_(sandbox_home(config.environment)) {
  mkdir((std::string(contract::kRuntimeDir) + "/p").c_str(), 0700);
}

ProcessTable::~ProcessTable() { kill_all(); }

std::shared_ptr<ProcessTable::Record> ProcessTable::find(const json& params) {
  std::string id = require_string(params, "process_id");
  std::lock_guard lock(mutex_);
  auto it = records_.find(id);
  if (it == records_.end())
    throw SandboxError(codes::kProcessNotFound, "no process '" + id + "' in this sandbox (process_list shows them)");
  return it->second;
}

json ProcessTable::describe(const Record& r) const {
  // A command can be a whole script: results show its start (docs/files.md,
  // "What hosts show").
  std::size_t shown = fit_prefix(r.command, kShownCommandCost, 2);
  json j = {{"process_id", r.id}, {"command", r.command.substr(0, shown)}, {"status", r.status}, {"pid", r.pid}};
  if (shown < r.command.size()) j["command_truncated"] = true;
  j["exit_code"] = r.exit_code ? json(*r.exit_code) : json(nullptr);
  if (!r.signal.empty()) j["signal"] = r.signal;
  if (r.service) j["restart"] = "on-restore";
  return j;
}

void ProcessTable::watch_streams(const std::shared_ptr<Record>& record, int out_fd, int err_fd, int status_fd) {
  std::weak_ptr<Record> weak = record;
  auto append = [this, weak](bool is_err) {
    return [this, weak, is_err](std::string_view data) {
      if (auto r = weak.lock()) {
        std::lock_guard lock(mutex_);
        (is_err ? r->err : r->out).append(data);
        r->changed.notify_all();
      }
    };
  };
  auto closed = [this, weak] {
    if (auto r = weak.lock()) {
      std::lock_guard lock(mutex_);
      --r->open_streams;
      r->changed.notify_all();
    }
  };
  record->open_streams = 2;
  io_.watch(out_fd, append(false), closed);
  io_.watch(err_fd, append(true), closed);
  io_.watch(
      status_fd,
      [this, weak](std::string_view data) {
        auto r = weak.lock();
        if (!r) return;
        std::lock_guard lock(mutex_);
        r->status_bytes.append(data);
        if (r->status_bytes.size() >= sizeof(int) && r->status == "running") {
          int status;
          std::memcpy(&status, r->status_bytes.data(), sizeof status);
          set_exit(status, r->status, r->exit_code, r->signal);
          r->ended_unix_ms = unix_ms();
          r->changed.notify_all();
        }
      },
      [this, weak] {
        auto r = weak.lock();
        if (!r) return;
        std::lock_guard lock(mutex_);
        // The reaper died without a report: killed along with its tree by
        // process_kill, or by something else in the sandbox.
        if (r->status == "running") {
          r->ended_unix_ms = unix_ms();
          r->status = r->kill_requested ? "killed" : "lost";
          if (r->kill_requested) {
            r->exit_code = 128 + SIGKILL;
            r->signal = "SIGKILL";
          }
        }
        r->changed.notify_all();
      });
}

json ProcessTable::start(const json& params) {
  std::string command = require_string(params, "command");
  std::string restart = param_string(params, "restart", "never");
  if (restart != "never" && restart != "on-restore")
    throw SandboxError(codes::kInvalidArguments, "restart must be \"never\" or \"on-restore\"");
  SessionContext session = resolve_(param_string(params, "session", "default"));
  Launch launch;
  launch.command = command;
  launch.cwd = resolve_path(session.cwd, param_string(params, "cwd", ""));
  launch.state_file = session.state_file;
  for (const auto& [name, value] : param_env(params)) launch.env.emplace_back(name, value);
  std::string given = param_string(params, "cwd", "");
  launch.cwd_hint = !given.empty() && given[0] != '/' ? " (a relative cwd resolves against the session's cwd " + session.cwd + ")" : "";
  if (restart == "on-restore") {
    Service service;
    service.command = command;
    service.cwd = launch.cwd;
    service.env = launch.env;
    service.session_state = read_session_state(session.state_file);
    launch.service = std::move(service);
  }
  auto record = this->launch(launch);
  return {{"process_id", record->id}, {"pid", record->pid}, {"status", "running"}};
}

json ProcessTable::restore_services(const json&) {
  json started = json::array(), failed = json::array();
  std::vector<Service> services;
  try {
    services = services_.load();
  } catch (const SandboxError& e) {
    return {{"started", started}, {"failed", failed}, {"problem", e.what()}};
  }
  for (auto& service : services) {
    {
      std::lock_guard lock(mutex_);
      auto it = records_.find(service.process_id);
      if (it != records_.end() && it->second->status == "running") continue;  // this agent runs it already
    }
    Launch launch;
    launch.id = service.process_id;
    launch.command = service.command;
    launch.cwd = service.cwd;
    launch.env = service.env;
    std::string state = std::string(contract::kRuntimeDir) + "/p/" + service.process_id + ".state";
    try {
      write_text_file(state, service.session_state);
      launch.state_file = state;
      launch.service = service;
      launch.record_service = false;  // it is in the file already
      auto record = this->launch(launch);
      started.push_back({{"process_id", record->id}, {"command", service.command.substr(0, fit_prefix(service.command, kShownCommandCost, 2))}});
    } catch (const SandboxError& e) {
      failed.push_back({{"process_id", service.process_id}, {"error", e.what()}});
    }
  }
  return {{"started", started}, {"failed", failed}};
}

std::shared_ptr<ProcessTable::Record> ProcessTable::launch(const Launch& launch) {
  const std::string& cwd = launch.cwd;
  struct stat st;
  if (stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw SandboxError(codes::kInvalidCwd, "working directory '" + cwd + "' does not exist or is not a directory" + launch.cwd_hint);
  std::string prefix;
  for (const auto& [name, value] : launch.env) prefix += name + "=" + shell_quote(value) + " ";

  auto record = std::make_shared<Record>(config_.process_head_bytes, config_.process_tail_bytes);
  record->command = launch.command;
  record->service = launch.service.has_value();
  record->started_unix_ms = unix_ms();
  {
    std::lock_guard lock(mutex_);
    std::size_t background = 0;
    for (const auto& [id, r] : records_) background += r->background;
    if (background >= kMaxBackground) {
      for (auto it = records_.begin(); it != records_.end(); ++it) {
        if (it->second->background && it->second->status != "running") {
          records_.erase(it);
          --background;
          break;
        }
      }
    }
    if (background >= kMaxBackground)
      throw SandboxError(codes::kInvalidArguments, "this sandbox already runs " + std::to_string(kMaxBackground) +
                                                      " background processes; stop some with process_kill");
    if (launch.id.empty()) {
      record->id = "proc-" + std::to_string(next_id_++);
    } else {
      record->id = launch.id;  // a service started again keeps its id; new ids continue after it
      next_id_ = std::max<unsigned>(next_id_, static_cast<unsigned>(std::atoi(launch.id.c_str() + 5)) + 1);
    }
  }
  if (launch.service && launch.record_service) {
    Service service = *launch.service;
    service.process_id = record->id;
    services_.put(service);  // recorded before it runs: a start that cannot be kept is refused
  }
  std::string script = std::string(contract::kRuntimeDir) + "/p/" + record->id + ".sh";
  write_text_file(script, launch.command + "\n");
  // The session's state first (functions, exported variables, aliases), then
  // the command sourced from a file so heredocs and quotes need no escaping.
  std::string shell = ". " + shell_quote(launch.state_file) + " >/dev/null 2>&1; set +e; shopt -s expand_aliases\n" +
                      "builtin cd -- " + shell_quote(cwd) + " || exit 126\n" + prefix + ". " + shell_quote(script);

  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
    throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", errno));
  SpawnSpec spec;
  spec.argv = {"/bin/bash", "--noprofile", "--norc", "-c", shell};
  spec.env = config_.environment;
  spec.cwd = cwd;
  spec.stdin_fd = in[0];
  spec.stdout_fd = out[1];
  spec.stderr_fd = err[1];
  Spawned spawned;
  try {
    spawned = spawn_supervised(spec);
  } catch (...) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    if (launch.service && launch.record_service) services_.remove(record->id);
    throw;
  }
  for (int fd : {in[0], out[1], err[1]}) close(fd);
  record->reaper = spawned.reaper;
  record->pid = spawned.pid;
  record->stdin_fd = in[1];
  {
    std::lock_guard lock(mutex_);
    records_[record->id] = record;
  }
  watch_streams(record, out[0], err[0], spawned.status_fd);
  return record;
}

json ProcessTable::list(const json& params) {
  std::string cursor = param_string(params, "cursor", "");
  std::lock_guard lock(mutex_);
  json list = json::array();
  json result = json::object();  // `truncated` only when cut, as before paging
  std::size_t used = 0;
  for (auto it = cursor.empty() ? records_.begin() : records_.upper_bound(cursor); it != records_.end(); ++it) {
    if (!it->second->background) continue;
    json entry = describe(*it->second);
    // Shown twice (a text line and its JSON), with room for its id as the
    // next cursor should it be the last.
    std::size_t cost = 2 * entry.dump().size();
    if (!list.empty() && used + cost + 2 * (it->first.size() + 8) > config_.inline_output_chars) {
      result["truncated"] = true;
      result["next_cursor"] = list.back()["process_id"];
      break;
    }
    used += cost;
    list.push_back(std::move(entry));
  }
  result["processes"] = std::move(list);
  return result;
}

json ProcessTable::wait(AgentRequest& request) {
  const json& params = request.params();
  auto record = find(params);
  auto timeout = std::chrono::milliseconds(std::clamp<std::int64_t>(param_int(params, "timeout_ms", 30'000), 0, 3'600'000));
  int port = static_cast<int>(param_int(params, "port", 0));
  if (port < 0 || port > 65535) throw SandboxError(codes::kInvalidArguments, "port must be between 1 and 65535");
  auto deadline = Clock::now() + timeout;
  request.on_cancel([record, this] {
    std::lock_guard inner(mutex_);
    record->changed.notify_all();
  });
  std::unique_lock lock(mutex_);
  bool port_ready = false;
  for (;;) {
    if (record->status != "running" || request.cancelled()) break;
    if (port > 0) {
      lock.unlock();
      port_ready = port_accepts(port);
      lock.lock();
      if (port_ready) break;
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    auto step = port > 0 ? std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(50)) : deadline - now;
    record->changed.wait_for(lock, step);
  }
  json result = describe(*record);
  result.erase("command");
  result["timed_out"] = !port_ready && record->status == "running" && !request.cancelled();
  if (port > 0) result["port_ready"] = port_ready;
  return result;
}

int param_signal(const json& params, int fallback) {
  if (!params.contains("signal") || params["signal"].is_null()) return fallback;
  const json& s = params["signal"];
  // The schema takes a string (no union types: docs/protocol.md, "Tool
  // schemas"), so a number comes as "9"; an integer is still understood.
  int sig = s.is_number_integer() ? s.get<int>() : s.is_string() ? signal_number(s.get<std::string>()) : 0;
  if (s.is_string() && sig == 0) {
    const auto& text = s.get_ref<const std::string&>();
    if (!text.empty() && text.size() <= 2 && text.find_first_not_of("0123456789") == std::string::npos)
      sig = std::stoi(text);
  }
  if (sig <= 0 || sig >= 65)
    throw SandboxError(codes::kInvalidArguments, "unknown signal " + s.dump() + " (use a name like \"SIGTERM\" or a number)");
  return sig;
}

json ProcessTable::kill(const json& params) {
  auto record = find(params);
  int sig = param_signal(params, SIGTERM);
  if (!record->background) throw SandboxError(codes::kInvalidArguments, record->id + " is the output of a finished exec");
  if (record->service) {
    // Stopped on purpose: not started again after a restore.
    services_.remove(record->id);
    std::lock_guard lock(mutex_);
    record->service = false;
  }
  std::function<void()> cancel;
  {
    std::lock_guard lock(mutex_);
    cancel = record->cancel;
    if (cancel) record->kill_requested = true;
  }
  if (cancel) {
    // A yielded exec: it runs in its session's shell, whose tree is killed
    // (the session comes back as it was after its previous command).
    cancel();
  } else if (record->reaper <= 0) {
    // Lost at a teardown: nothing to signal (and kill(-1) would hit everything).
  } else if (sig == SIGKILL) {
    {
      std::lock_guard lock(mutex_);
      record->kill_requested = true;
    }
    kill_tree(record->reaper);
  } else {
    signal_tree(record->reaper, sig);
  }
  std::unique_lock lock(mutex_);
  record->changed.wait_for(lock, std::chrono::seconds(2), [&] { return record->status != "running"; });
  json result = describe(*record);
  result.erase("command");
  return result;
}

json ProcessTable::write(const json& params) {
  auto record = find(params);
  std::string data = param_string(params, "data", "");
  bool eof = params.value("eof", false);
  int fd;
  {
    std::lock_guard lock(mutex_);
    fd = record->stdin_fd;
  }
  if (fd < 0) throw SandboxError(codes::kInvalidArguments, "the stdin of " + record->id + " is already closed");
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::size_t written = 0;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (written < data.size() && Clock::now() < deadline) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
    } else {
      break;  // EPIPE: nobody reads stdin any more
    }
  }
  if (eof) {
    std::lock_guard lock(mutex_);
    if (record->stdin_fd >= 0) close(record->stdin_fd);
    record->stdin_fd = -1;
  }
  return {{"bytes_written", written}};
}

json ProcessTable::adopt_lost(const json& params) {
  if (!params.contains("processes") || !params["processes"].is_array())
    throw SandboxError(codes::kInvalidArguments, "process.adopt_lost needs a processes array");
  std::lock_guard lock(mutex_);
  for (const auto& p : params["processes"]) {
    std::string id = require_string(p, "process_id");
    auto record = std::make_shared<Record>(0, 0);
    record->id = id;
    record->command = param_string(p, "command", "");
    record->status = "lost";
    records_[id] = record;
    // New ids continue after the lost ones.
    if (id.rfind("proc-", 0) == 0) next_id_ = std::max<unsigned>(next_id_, static_cast<unsigned>(std::atoi(id.c_str() + 5)) + 1);
  }
  return {{"adopted", params["processes"].size()}};
}

std::vector<std::string> ProcessTable::background_ids() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& [id, r] : records_) {
    if (r->background) ids.push_back(id);
  }
  return ids;
}

void ProcessTable::kill_all() {
  std::vector<pid_t> reapers;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, r] : records_) {
      if (r->background && r->reaper > 0) reapers.push_back(r->reaper);
    }
  }
  for (pid_t reaper : reapers) kill_tree(reaper);
}

void register_process_methods(MethodTable& table, ProcessTable& p) {
  table[contract::methods::kProcessStart] = [&p](AgentRequest& r) { return p.start(r.params()); };
  table[contract::methods::kProcessList] = [&p](AgentRequest& r) { return p.list(r.params()); };
  table[contract::methods::kProcessAdoptLost] = [&p](AgentRequest& r) { return p.adopt_lost(r.params()); };
  table[contract::methods::kProcessRestoreServices] = [&p](AgentRequest& r) { return p.restore_services(r.params()); };
  table[contract::methods::kProcessOutput] = [&p](AgentRequest& r) { return p.output(r); };
  table[contract::methods::kProcessWait] = [&p](AgentRequest& r) { return p.wait(r); };
  table[contract::methods::kProcessKill] = [&p](AgentRequest& r) { return p.kill(r.params()); };
  table[contract::methods::kProcessWrite] = [&p](AgentRequest& r) { return p.write(r.params()); };
}

}  // namespace agentbox::agent
