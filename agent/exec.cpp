// exec (exec.h): one command in a session's shell, its output pumped from
// FIFOs, streamed as progress when asked, and cut to the inline cap.
#include "agent/exec.h"

#include "agent/output_buffer.h"
#include "agent/process_record.h"
#include "agent/session.h"
#include "agent/spawn.h"
#include "os/errno_text.h"
#include "os/utf8.h"
#include "rpc/framing.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::agent {

using Clock = std::chrono::steady_clock;

namespace {

int open_fifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST)
    throw SandboxError(codes::kInternal, os::errno_text("mkfifo " + path, errno));
  // Opened for reading before the shell opens it for writing, so the shell's
  // open never blocks; Linux reports no hang-up until a writer has come and gone.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw SandboxError(codes::kInternal, os::errno_text("open " + path, errno));
  return fd;
}

// The eventfd a run's loop polls for a cancel: raised by the request's
// cancel or, once the exec yielded, by process_kill; closed with the run, so
// a late raise writes nowhere.
struct CancelSignal {
  std::mutex mutex;
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  void raise() {
    std::lock_guard lock(mutex);
    std::uint64_t one = 1;
    if (fd >= 0) (void)!::write(fd, &one, sizeof one);
  }
  void close() {
    std::lock_guard lock(mutex);
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// One exec in flight.
struct Run {
  Run(std::size_t head, std::size_t tail) : out(head, tail), err(head, tail) {}
  std::string command;
  OutputBuffer out, err;
  // Once the exec yielded, output goes here (the process table's record).
  std::optional<ProcessTable::ExecFeed> feed;
  int out_fd = -1, err_fd = -1;
  std::shared_ptr<CancelSignal> cancel = std::make_shared<CancelSignal>();
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

constexpr std::size_t kStreamChunk = 8 * 1024;
constexpr std::uint64_t kStreamLimit = 1 << 20;  // progress messages are a preview, not the output
constexpr auto kStreamInterval = std::chrono::milliseconds(100);

void flush_stream(AgentRequest& request, std::string& pending, const char* name,
                  std::uint64_t& streamed) {
  if (pending.empty()) return;
  std::string chunk(os::utf8_prefix(pending, kStreamChunk));
  if (chunk.empty()) chunk = pending.substr(0, kStreamChunk);
  streamed += chunk.size();
  request.notify(contract::notifications::kOutput, {{"stream", name}, {"data", chunk}, {"bytes", streamed}});
  pending.erase(0, chunk.size());
}

// Reads what is available on a non-blocking fd into the run's stdout or
// stderr (its buffer, or its record once it yielded). Returns false at EOF.
bool pump(int fd, Run& run, bool is_err, std::size_t max_bytes) {
  char chunk[64 * 1024];
  std::size_t total = 0;
  std::string* pending = !run.stream ? nullptr : is_err ? &run.pending_err : &run.pending_out;
  while (total < max_bytes) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n > 0) {
      std::string_view data(chunk, static_cast<std::size_t>(n));
      if (run.feed) run.feed->append(is_err, data);
      else (is_err ? run.err : run.out).append(data);
      if (pending && pending->size() < kStreamLimit) pending->append(data);
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return !(n == 0);
  }
  return true;
}

// Where an exec with yield_ms hands its caller the answer: the result if
// the command ends first, else what yield_result says at yield_ms.
struct Yield {
  std::chrono::milliseconds after{0};
  std::mutex mutex;
  std::condition_variable answered;
  std::optional<json> result;
  std::exception_ptr error;
  void answer(json r) {
    std::lock_guard lock(mutex);
    if (result || error) return;
    result = std::move(r);
    answered.notify_all();
  }
  void fail(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (result || error) return;
    error = std::move(e);
    answered.notify_all();
  }
};

// The answer at yield_ms: output so far (cut like an exec's) and the id
// under which the command goes on. From here on the run's output goes to
// the process table.
json yield_result(Session& s, Run& run, const ExecEnv& ctx, const std::string& command) {
  auto [out_budget, err_budget] = split_budget(cost_bound(run.out.total()), cost_bound(run.err.total()), ctx.config.inline_output_chars);
  auto [out_lines, err_lines] = split_budget(run.out.lines() + 1, run.err.lines() + 1, kMaxShownLines);
  auto out = run.out.inline_view(out_budget, out_lines);
  auto err = run.err.inline_view(err_budget, err_lines);
  auto duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - run.started);
  std::string id = ctx.processes.reserve_exec_id();
  json result = {
      {"running", true},
      {"process_id", id},
      {"stdout", out.text},
      {"stderr", err.text},
      {"truncated", out.truncated || err.truncated},
      {"duration_ms", duration.count()},
      {"session", s.name},
      {"stdout_bytes", run.out.total()},
      {"stderr_bytes", run.err.total()},
      // process_output from here pages what was cut, else shows what is new.
      {"next_offset", out.truncated ? out.cut_from : run.out.total()},
      {"stderr_next_offset", err.truncated ? err.cut_from : run.err.total()},
      {"notice", "still running after yield_ms as " + id + "; process_output, process_wait and process_kill reach it. "
                 "Session '" + s.name + "' runs it: its next command waits until it ends (another session does not)"},
  };
  std::int64_t started_ms = unix_ms() - duration.count();
  std::weak_ptr<CancelSignal> cancel = run.cancel;
  run.feed = ctx.processes.add_running_exec(id, command, s.shell.pid, std::move(run.out), std::move(run.err), started_ms,
                                            [cancel] {
                                              if (auto c = cancel.lock()) c->raise();
                                            });
  run.stream = false;
  return result;
}

json finish(Session& s, Run& run, const ExecEnv& ctx) {
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
    std::lock_guard lock(ctx.sessions_mutex);
    s.cwd = cwd;
  }
  // Everything the command wrote before it ended is already in the FIFOs.
  run.stream = false;
  bool out_open = pump(run.out_fd, run, false, 16 << 20);
  bool err_open = pump(run.err_fd, run, true, 16 << 20);
  // What is still pending goes in the reply only: a notification right before
  // the reply is one a client may drop (docs/protocol.md, "Progress").
  // Background jobs may still hold the FIFOs: keep them drained.
  if (out_open) ctx.io.drain(run.out_fd); else close(run.out_fd);
  if (err_open) ctx.io.drain(run.err_fd); else close(run.err_fd);
  run.cancel->close();
  std::string n = std::to_string(s.seq);
  for (const char* prefix : {"/c", "/i", "/o", "/e"}) unlink((s.dir + prefix + n).c_str());

  if (run.timed_out) run.exit_code = 124;
  if (run.cancelled) run.exit_code = 130;
  if (!killed && run.signal.empty() && run.exit_code > 128 && run.exit_code < 128 + 65) {
    // The shell reports a command killed by signal N as 128+N.
    std::string name = signal_name(run.exit_code - 128);
    if (name.rfind("SIG", 0) == 0 && std::isalpha(static_cast<unsigned char>(name[3]))) run.signal = name;
  }
  if (run.feed) {  // a yielded exec: its record has the output
    run.feed->ended(run.exit_code, run.signal, killed);
    return {};
  }
  auto duration = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - run.started);
  // Budgets are shown_cost (text and structuredContent together) and lines.
  auto [out_budget, err_budget] = split_budget(cost_bound(run.out.total()), cost_bound(run.err.total()), ctx.config.inline_output_chars);
  auto [out_lines, err_lines] = split_budget(run.out.lines() + 1, run.err.lines() + 1, kMaxShownLines);
  auto out = run.out.inline_view(out_budget, out_lines);
  auto err = run.err.inline_view(err_budget, err_lines);
  bool truncated = out.truncated || err.truncated;
  std::string id;
  if (truncated) id = ctx.processes.reserve_exec_id();
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
    ctx.processes.add_exec_output(id, run.command, std::move(run.out), std::move(run.err), run.exit_code);
  }
  return result;
}

}  // namespace

ExecRequest parse_exec(const json& params) {
  ExecRequest exec;
  exec.command = require_string(params, "command");
  exec.timeout = std::chrono::milliseconds(
      std::max<std::int64_t>(1, param_int(params, "timeout_ms", contract::kDefaultTimeoutMs)));
  exec.env = param_env(params);
  exec.yield = std::chrono::milliseconds(std::max<std::int64_t>(0, param_int(params, "yield_ms", 0)));
  return exec;
}

namespace {

json run_in_shell(AgentRequest* request, const json& params, const ExecRequest& exec, Session& s, const ExecEnv& ctx,
                  Yield* yield) {
  const std::string& command = exec.command;
  auto timeout = exec.timeout;
  const auto& env = exec.env;

  std::unique_lock run_lock(s.run);
  {
    std::lock_guard lock(ctx.sessions_mutex);
    if (s.deleted) throw SandboxError(codes::kSessionNotFound, "session '" + s.name + "' was deleted");
  }
  std::string cwd_override;
  if (params.contains("cwd") && params["cwd"].is_string()) {
    std::string base;
    {
      std::lock_guard lock(ctx.sessions_mutex);
      base = s.cwd;
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
  if (s.shell.reaper <= 0) start_shell(s, ctx.config.environment);
  struct Touch {
    Session& s;
    ~Touch() { s.last_used = Clock::now(); }  // idle counts from the end of the command
  } touch{s};

  Run run(ctx.config.process_head_bytes, ctx.config.process_tail_bytes);
  run.command = command;
  run.stream = params.value("stream", false);
  std::string n = std::to_string(++s.seq);
  std::string cmd_file = s.dir + "/c" + n, in_file = s.dir + "/i" + n;
  std::string out_file = s.dir + "/o" + n, err_file = s.dir + "/e" + n;
  // A trailing newline lets a heredoc terminator sit on the last line.
  write_text_file(cmd_file, command + "\n");
  std::string stdin_source = "/dev/null";
  if (params.contains("stdin") && params["stdin"].is_string()) {
    write_text_file(in_file, params["stdin"].get<std::string>());
    stdin_source = in_file;
  }
  run.out_fd = open_fifo(out_file);
  run.err_fd = open_fifo(err_file);

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
  request->on_cancel([cancel = run.cancel] { cancel->raise(); });
  // A write error means the shell is gone; its status pipe then says how it ended.
  rpc::write_all(s.control_fd, line);

  auto deadline = run.started + timeout;
  auto yield_at = yield ? run.started + yield->after : Clock::time_point::max();
  // A stream at its end stays readable (POLLHUP): it leaves the poll set, or
  // the loop would spin while the shell is still writing its report.
  bool report_open = true, out_open = true, err_open = true;
  while (!run.reported && !run.shell_died) {
    auto now = Clock::now();
    if (now >= deadline) {
      run.timed_out = true;
      break;
    }
    if (now >= yield_at) {
      // Still running: the caller gets what came so far and a process id;
      // the command goes on here, its output into the process table.
      yield->answer(yield_result(s, run, ctx, command));
      request = nullptr;
      yield_at = Clock::time_point::max();
      continue;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline, yield_at) - now);
    if (run.stream) wait = std::min<std::chrono::milliseconds>(wait, kStreamInterval);
    // The shell's end is watched on the reaper's status pipe, not on EOF of
    // the report pipe: after `exec prog` the command still runs though the
    // shell (and its report pipe) is gone.
    pollfd fds[5] = {{report_open ? s.report_fd : -1, POLLIN, 0}, {out_open ? run.out_fd : -1, POLLIN, 0},
                     {err_open ? run.err_fd : -1, POLLIN, 0},
                     {run.cancel->fd, POLLIN, 0}, {s.shell.status_fd, POLLIN, 0}};
    int ready = poll(fds, 5, static_cast<int>(wait.count()) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents) out_open = pump(run.out_fd, run, false, 1 << 20);
    if (fds[2].revents) err_open = pump(run.err_fd, run, true, 1 << 20);
    if (fds[3].revents) {
      run.cancelled = true;
      break;
    }
    if (fds[0].revents) {
      report_open = read_report(s, run.report);
      run.reported = std::count(run.report.begin(), run.report.end(), '\0') >= 2;
    }
    if (fds[4].revents && !run.reported) {
      int status = read_wait_status(s.shell.status_fd);
      run.shell_died = true;
      if (status >= 0 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
      if (status >= 0 && WIFSIGNALED(status)) {
        run.exit_code = 128 + WTERMSIG(status);
        run.signal = signal_name(WTERMSIG(status));
      }
    }
    if (run.stream && Clock::now() - run.last_flush >= kStreamInterval) {
      flush_stream(*request, run.pending_out, "stdout", run.streamed);
      flush_stream(*request, run.pending_err, "stderr", run.streamed);
      run.last_flush = Clock::now();
    }
  }
  return finish(s, run, ctx);
}

}  // namespace

json run_exec(AgentRequest& request, const ExecRequest& exec, std::shared_ptr<Session> s, const ExecEnv& ctx) {
  if (exec.yield.count() <= 0) return run_in_shell(&request, request.params(), exec, *s, ctx, nullptr);
  // The command runs on a thread of its own, which holds the session for as
  // long as it runs; this one answers with its result or, at yield_ms, with
  // what came so far (whichever is first).
  auto yield = std::make_shared<Yield>();
  yield->after = exec.yield;
  std::thread([&request, params = request.params(), exec, s, ctx, yield] {
    try {
      json result = run_in_shell(&request, params, exec, *s, ctx, yield.get());
      yield->answer(std::move(result));  // ignored once it yielded
    } catch (...) {
      yield->fail(std::current_exception());
    }
  }).detach();
  std::unique_lock lock(yield->mutex);
  yield->answered.wait(lock, [&] { return yield->result || yield->error; });
  if (yield->error) std::rethrow_exception(yield->error);
  return std::move(*yield->result);
}

}  // namespace agentbox::agent
