#include "agent/terminals.h"
#include "agent/line_pattern.h"

#include "agent/output_buffer.h"
#include "agent/screen.h"
#include "agent/spawn.h"
#include "os/errno_text.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

namespace agentbox::agent {

using Clock = std::chrono::steady_clock;

namespace {

// Output that arrives in bursts (a screen redrawn in several writes) is
// waited on until it has been quiet this long.
constexpr auto kSettle = std::chrono::milliseconds(50);
constexpr auto kMatchSettle = std::chrono::milliseconds(500);
constexpr std::int64_t kMaxWaitMs = 300'000;

struct Size {
  int rows, cols;
};

Size size_param(const json& params, Size fallback) {
  Size size{static_cast<int>(param_int(params, "rows", fallback.rows)), static_cast<int>(param_int(params, "cols", fallback.cols))};
  if (size.cols < 2 || size.cols > TerminalTable::kMaxCols || size.rows < 2 || size.rows > TerminalTable::kMaxRows)
    throw SandboxError(codes::kInvalidArguments, "a terminal is 2 to " + std::to_string(TerminalTable::kMaxCols) +
                                                     " columns and 2 to " + std::to_string(TerminalTable::kMaxRows) + " rows");
  if (size.cols * size.rows > TerminalTable::kMaxCells)
    throw SandboxError(codes::kInvalidArguments, "a terminal holds at most " + std::to_string(TerminalTable::kMaxCells) +
                                                     " cells (columns times rows)");
  return size;
}

void set_window(int fd, Size size) {
  winsize ws{};
  ws.ws_row = static_cast<unsigned short>(size.rows);
  ws.ws_col = static_cast<unsigned short>(size.cols);
  if (ioctl(fd, TIOCSWINSZ, &ws) != 0) throw SandboxError(codes::kInternal, os::errno_text("set the terminal's size", errno));
}

// A new pseudo-terminal: {master, the program's end}.
std::pair<int, int> open_pty(Size size) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) throw SandboxError(codes::kSpawnFailed, os::errno_text("open a pseudo-terminal", errno));
  char name[128];
  if (grantpt(master) != 0 || unlockpt(master) != 0 || ptsname_r(master, name, sizeof name) != 0) {
    int err = errno;
    close(master);
    throw SandboxError(codes::kSpawnFailed, os::errno_text("prepare a pseudo-terminal", err));
  }
  int program = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (program < 0) {
    int err = errno;
    close(master);
    throw SandboxError(codes::kSpawnFailed, os::errno_text("open " + std::string(name), err));
  }
  try {
    set_window(master, size);
  } catch (...) {
    close(master);
    close(program);
    throw;
  }
  return {master, program};
}

}  // namespace

struct TerminalTable::Terminal {
  Terminal(std::size_t head, std::size_t tail) : out(head, tail) {}
  ~Terminal() {
    if (master >= 0) close(master);
  }
  std::string id;
  std::string command;
  pid_t reaper = -1;
  pid_t pid = -1;
  int master = -1;  // writes and resizes; the IoLoop reads a duplicate
  std::string status = "running";
  std::optional<int> exit_code;
  std::string signal;
  std::string status_bytes;  // the reaper's report, 4 raw bytes
  bool kill_requested = false;
  bool reading = false;  // until the pseudo-terminal's end
  OutputBuffer out;
  std::unique_ptr<Screen> screen;
  Clock::time_point last_output = Clock::now();
  std::condition_variable changed;

  bool ended() const { return status != "running" && !reading; }
};

TerminalTable::TerminalTable(IoLoop& io, const AgentConfig& config, SessionResolver resolve)
    : io_(io), config_(config), resolve_(std::move(resolve)) {
  mkdir((std::string(contract::kRuntimeDir) + "/t").c_str(), 0700);
}

TerminalTable::~TerminalTable() { kill_all(); }

std::shared_ptr<TerminalTable::Terminal> TerminalTable::find(const json& params) {
  std::string id = require_string(params, "terminal_id");
  std::lock_guard lock(mutex_);
  auto it = terminals_.find(id);
  if (it == terminals_.end())
    throw SandboxError(codes::kTerminalNotFound, "no terminal '" + id + "' in this sandbox (terminal_list shows them)");
  return it->second;
}

json TerminalTable::describe(const Terminal& t) const {
  std::size_t shown = fit_prefix(t.command, ProcessTable::kShownCommandCost, 2);
  json d = {{"terminal_id", t.id}, {"command", t.command.substr(0, shown)}, {"status", t.status},
            {"exit_code", t.exit_code ? json(*t.exit_code) : json(nullptr)}};
  if (shown < t.command.size()) d["command_truncated"] = true;
  if (t.screen) {
    d["cols"] = t.screen->cols();
    d["rows"] = t.screen->rows();
  }
  if (t.pid > 0) d["pid"] = t.pid;
  if (!t.signal.empty()) d["signal"] = t.signal;
  return d;
}

void TerminalTable::make_room() {
  std::size_t running = 0;
  for (const auto& [id, t] : terminals_) running += t->status == "running";
  if (running >= kMaxRunning)
    throw SandboxError(codes::kInvalidArguments, "this sandbox already runs " + std::to_string(kMaxRunning) +
                                                     " terminals; end some with terminal_kill");
  while (terminals_.size() >= kMaxKept) {
    auto oldest = terminals_.end();
    for (auto it = terminals_.begin(); it != terminals_.end(); ++it)
      if (it->second->status != "running") {
        oldest = it;
        break;
      }
    if (oldest == terminals_.end()) break;
    terminals_.erase(oldest);
  }
}

json TerminalTable::start(const json& params) {
  Size size = size_param(params, {24, 80});
  SessionContext session = resolve_(param_string(params, "session", "default"));
  std::string cwd = resolve_path(session.cwd, param_string(params, "cwd", ""));
  struct stat st;
  if (stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw SandboxError(codes::kInvalidCwd, "working directory '" + cwd + "' does not exist or is not a directory");
  std::string command = param_string(params, "command", "");
  std::string prefix;
  for (const auto& [name, value] : param_env(params)) prefix += "export " + name + "=" + shell_quote(value) + "\n";

  auto terminal = std::make_shared<Terminal>(config_.process_head_bytes, config_.process_tail_bytes);
  {
    std::lock_guard lock(mutex_);
    make_room();
    terminal->id = "term-" + std::to_string(next_id_++);
  }
  terminal->command = command.empty() ? "bash" : command;
  // The session's state, the cwd and the variables first, in a file of the
  // terminal's own; then the command sourced from a file, or else an
  // interactive bash that reads the same file as its rc file.
  std::string base = std::string(contract::kRuntimeDir) + "/t/" + terminal->id;
  std::string rc = ". " + shell_quote(session.state_file) + " >/dev/null 2>&1\nbuiltin cd -- " + shell_quote(cwd) +
                   " || exit 126\n" + prefix;
  write_text_file(base + ".rc", rc);
  std::string shell;
  if (command.empty()) {
    shell = "exec /bin/bash --noprofile --rcfile " + shell_quote(base + ".rc") + " -i";
  } else {
    write_text_file(base + ".sh", command + "\n");
    shell = ". " + shell_quote(base + ".rc") + "\nset +e; shopt -s expand_aliases\n. " + shell_quote(base + ".sh");
  }

  auto [master, program] = open_pty(size);
  SpawnSpec spec;
  spec.argv = {"/bin/bash", "--noprofile", "--norc", "-c", shell};
  spec.env = config_.environment;
  std::erase_if(spec.env, [](const std::string& e) { return e.rfind("TERM=", 0) == 0; });
  spec.env.push_back("TERM=xterm-256color");
  spec.cwd = cwd;
  spec.stdin_fd = spec.stdout_fd = spec.stderr_fd = program;
  spec.terminal = true;
  Spawned spawned;
  try {
    spawned = spawn_supervised(spec);
  } catch (...) {
    close(master);
    close(program);
    throw;
  }
  close(program);
  terminal->reaper = spawned.reaper;
  terminal->pid = spawned.pid;
  terminal->master = master;
  int write_fd = master;
  terminal->screen = std::make_unique<Screen>(size.rows, size.cols, [write_fd](std::string_view reply) {
    // What the terminal answers the program (a cursor report): never
    // waited on; the master is non-blocking once the IoLoop has it.
    (void)!::write(write_fd, reply.data(), reply.size());
  });
  int read_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
  if (read_fd < 0) {
    kill_tree(spawned.reaper);
    close(spawned.status_fd);
    throw SandboxError(codes::kInternal, os::errno_text("duplicate the terminal", errno));
  }
  {
    std::lock_guard lock(mutex_);
    terminal->reading = true;
    terminals_[terminal->id] = terminal;
  }
  watch(terminal, read_fd, spawned.status_fd);
  return {{"terminal_id", terminal->id}, {"pid", terminal->pid}, {"cols", size.cols}, {"rows", size.rows},
          {"status", "running"}};
}

void TerminalTable::watch(const std::shared_ptr<Terminal>& terminal, int read_fd, int status_fd) {
  std::weak_ptr<Terminal> weak = terminal;
  io_.watch(
      read_fd,
      [this, weak](std::string_view data) {
        if (auto t = weak.lock()) {
          std::lock_guard lock(mutex_);
          t->out.append(data);
          t->screen->feed(data);
          t->last_output = Clock::now();
          t->changed.notify_all();
        }
      },
      [this, weak] {  // EIO: every copy of the program's end is closed
        if (auto t = weak.lock()) {
          std::lock_guard lock(mutex_);
          t->reading = false;
          t->changed.notify_all();
        }
      });
  io_.watch(
      status_fd,
      [this, weak](std::string_view data) {
        auto t = weak.lock();
        if (!t) return;
        std::lock_guard lock(mutex_);
        t->status_bytes.append(data);
        if (t->status_bytes.size() >= sizeof(int) && t->status == "running") {
          int status;
          std::memcpy(&status, t->status_bytes.data(), sizeof status);
          if (WIFEXITED(status)) {
            t->status = "exited";
            t->exit_code = WEXITSTATUS(status);
          } else if (WIFSIGNALED(status)) {
            t->status = "killed";
            t->exit_code = 128 + WTERMSIG(status);
            t->signal = signal_name(WTERMSIG(status));
          }
          t->changed.notify_all();
        }
      },
      [this, weak] {
        auto t = weak.lock();
        if (!t) return;
        std::lock_guard lock(mutex_);
        if (t->status == "running") {  // the reaper died without a report
          t->status = t->kill_requested ? "killed" : "lost";
          if (t->kill_requested) {
            t->exit_code = 128 + SIGKILL;
            t->signal = "SIGKILL";
          }
        }
        t->changed.notify_all();
      });
}

json TerminalTable::wait_and_show(std::unique_lock<std::mutex>& lock, Terminal& t, std::uint64_t cursor,
                                  const json& params, AgentRequest& request) {
  auto wait = std::chrono::milliseconds(std::clamp<std::int64_t>(param_int(params, "wait_ms", 0), 0, kMaxWaitMs));
  std::string pattern_text = param_string(params, "pattern", "");
  std::optional<LinePattern> pattern;
  std::optional<LineScanner> scanner;
  if (!pattern_text.empty()) {
    pattern.emplace(pattern_text);
    scanner.emplace(*pattern, cursor);
  }
  auto deadline = Clock::now() + wait;
  bool matched = false;
  std::uint64_t screen_seen = cursor;  // output the screen was last matched after
  for (;;) {
    if (pattern && !matched) {
      // The screen counts once output has come after the cursor: before,
      // it is what the call was made on (a write's keys not yet echoed).
      matched = scanner->scan(t.out);
      if (!matched && t.screen && t.out.total() > screen_seen) {
        screen_seen = t.out.total();
        matched = pattern->search_lines(t.screen->text());
      }
      // What matched is often drawn in the middle of a redraw: the rest of
      // the burst is let in (up to kMatchSettle) before the screen is shown.
      if (matched) deadline = std::min(deadline, Clock::now() + kMatchSettle);
    }
    if (request.cancelled() || t.ended()) break;
    auto now = Clock::now();
    if (now >= deadline) break;
    auto until = deadline;
    if ((!pattern || matched) && t.out.total() > cursor) {
      // New output: return once it has settled.
      if (now - t.last_output >= kSettle) break;
      until = std::min(deadline, t.last_output + kSettle);
    }
    t.changed.wait_until(lock, until);
  }
  // The screen first (what the call is for); the raw output gets the rest.
  std::size_t budget = config_.inline_output_chars;
  std::string screen = t.screen ? t.screen->text() : "";
  bool screen_cut = false;
  if (shown_cost(screen) + 1024 > budget) {
    screen.resize(fit_prefix(screen, budget - 1024, kMaxShownLines));
    screen_cut = true;
  }
  std::size_t rest = budget - shown_cost(screen);
  auto slice = t.out.read(cursor, rest, kMaxShownLines - std::count(screen.begin(), screen.end(), '\n'));
  json result = describe(t);
  result.erase("command");
  result.erase("command_truncated");
  result["output"] = slice.data;
  result["next_cursor"] = slice.next_offset;
  result["output_bytes"] = t.out.total();
  result["screen"] = screen;
  if (screen_cut) result["screen_truncated"] = true;
  if (t.screen) result["screen_cursor"] = {{"row", t.screen->cursor_row() + 1}, {"col", t.screen->cursor_col() + 1}};
  result["exited"] = t.ended();
  if (slice.skipped) result["skipped_bytes"] = slice.skipped;
  if (pattern) result["matched"] = matched;
  return result;
}

json TerminalTable::read(AgentRequest& request) {
  const json& params = request.params();
  auto t = find(params);
  std::int64_t cursor = param_int(params, "cursor", 0);
  if (cursor < 0) throw SandboxError(codes::kInvalidArguments, "cursor must be 0 or more");
  request.on_cancel([t, this] {
    std::lock_guard inner(mutex_);
    t->changed.notify_all();
  });
  std::unique_lock lock(mutex_);
  return wait_and_show(lock, *t, static_cast<std::uint64_t>(cursor), params, request);
}

json TerminalTable::write(AgentRequest& request) {
  const json& params = request.params();
  auto t = find(params);
  std::string data = param_string(params, "data", "");
  if (data.size() > kMaxWrite)
    throw SandboxError(codes::kInvalidArguments, "data is " + std::to_string(data.size()) + " bytes; a write takes at most " +
                                                     std::to_string(kMaxWrite));
  // A bad pattern is refused before any key is sent.
  if (std::string p = param_string(params, "pattern", ""); !p.empty()) LinePattern check(p);
  std::uint64_t cursor;
  int fd;
  {
    std::lock_guard lock(mutex_);
    if (t->status != "running" || t->master < 0)
      throw SandboxError(codes::kInvalidArguments, t->id + " has ended (" + t->status + "); terminal_read shows its last screen");
    cursor = t->out.total();  // what the keys cause comes after this
    fd = t->master;
  }
  // The master is non-blocking (the IoLoop made it so); a program that does
  // not read its input makes the write stop short, not hang.
  std::size_t written = 0;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (written < data.size() && Clock::now() < deadline && !request.cancelled()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 50);
    } else {
      break;
    }
  }
  request.on_cancel([t, this] {
    std::lock_guard inner(mutex_);
    t->changed.notify_all();
  });
  std::unique_lock lock(mutex_);
  json result = wait_and_show(lock, *t, cursor, params, request);
  result["bytes_written"] = written;
  return result;
}

json TerminalTable::resize(const json& params) {
  auto t = find(params);
  std::lock_guard lock(mutex_);
  Size size = size_param(params, {t->screen ? t->screen->rows() : 24, t->screen ? t->screen->cols() : 80});
  if (t->status != "running" || t->master < 0) throw SandboxError(codes::kInvalidArguments, t->id + " has ended (" + t->status + ")");
  set_window(t->master, size);  // the kernel sends the program SIGWINCH
  t->screen->resize(size.rows, size.cols);
  return describe(*t);
}

json TerminalTable::kill(const json& params) {
  auto t = find(params);
  int sig = param_signal(params, SIGKILL);
  pid_t reaper;
  {
    std::lock_guard lock(mutex_);
    reaper = t->status == "running" ? t->reaper : -1;
    if (sig == SIGKILL) t->kill_requested = true;
  }
  if (reaper > 0) {
    if (sig == SIGKILL) kill_tree(reaper);
    else signal_tree(reaper, sig);
  }
  std::unique_lock lock(mutex_);
  t->changed.wait_for(lock, std::chrono::seconds(2), [&] { return t->status != "running"; });
  json result = describe(*t);
  result.erase("command");
  result.erase("command_truncated");
  return result;
}

json TerminalTable::list(const json&) {
  std::lock_guard lock(mutex_);
  json list = json::array();
  for (const auto& [id, t] : terminals_) list.push_back(describe(*t));
  return {{"terminals", list}};
}

json TerminalTable::adopt_lost(const json& params) {
  if (!params.contains("terminals") || !params["terminals"].is_array())
    throw SandboxError(codes::kInvalidArguments, "terminal.adopt_lost needs a terminals array");
  std::lock_guard lock(mutex_);
  for (const auto& entry : params["terminals"]) {
    std::string id = require_string(entry, "terminal_id");
    if (id.rfind("term-", 0) != 0 || terminals_.count(id)) continue;
    auto t = std::make_shared<Terminal>(0, 0);
    t->id = id;
    t->command = param_string(entry, "command", "");
    t->status = "lost";
    terminals_[id] = t;
    next_id_ = std::max<unsigned>(next_id_, static_cast<unsigned>(std::atoi(id.c_str() + 5)) + 1);
  }
  return {{"adopted", params["terminals"].size()}};
}

void TerminalTable::kill_all() {
  std::vector<pid_t> reapers;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, t] : terminals_)
      if (t->status == "running" && t->reaper > 0) reapers.push_back(t->reaper);
  }
  for (pid_t reaper : reapers) kill_tree(reaper);
}

void register_terminal_methods(MethodTable& table, TerminalTable& t) {
  table[contract::methods::kTerminalStart] = [&t](AgentRequest& r) { return t.start(r.params()); };
  table[contract::methods::kTerminalWrite] = [&t](AgentRequest& r) { return t.write(r); };
  table[contract::methods::kTerminalRead] = [&t](AgentRequest& r) { return t.read(r); };
  table[contract::methods::kTerminalResize] = [&t](AgentRequest& r) { return t.resize(r.params()); };
  table[contract::methods::kTerminalKill] = [&t](AgentRequest& r) { return t.kill(r.params()); };
  table[contract::methods::kTerminalList] = [&t](AgentRequest& r) { return t.list(r.params()); };
  table[contract::methods::kTerminalAdoptLost] = [&t](AgentRequest& r) { return t.adopt_lost(r.params()); };
}

}  // namespace agentbox::agent
