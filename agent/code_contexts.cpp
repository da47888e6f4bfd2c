#include "agent/code_contexts.h"

#include "agent/output_buffer.h"
#include "agent/spawn.h"
#include "os/errno_text.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::agent {

using Clock = std::chrono::steady_clock;

namespace {

// How long an interrupted interpreter has to answer before it is killed.
constexpr auto kGrace = std::chrono::seconds(2);
constexpr std::int64_t kMaxTimeoutMs = 3'600'000;

const char* program_of(const std::string& language) {
  if (language == "python") return "python3";
  if (language == "javascript") return "node";
  if (language == "bash") return "bash";
  throw SandboxError(codes::kInvalidArguments, "language must be python, javascript or bash, not '" + language + "'");
}

// The interpreter's path from the PATH the box's commands get.
std::string find_program(const std::string& name, const std::vector<std::string>& env) {
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  std::size_t from = 0;
  while (from <= path.size()) {
    std::size_t to = path.find(':', from);
    if (to == std::string::npos) to = path.size();
    std::string dir = path.substr(from, to - from);
    if (!dir.empty() && dir[0] == '/') {
      std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    from = to + 1;
  }
  return "";
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads what fd has now; false at its end (or an error other than EAGAIN).
bool read_some(int fd, std::string& into, bool keep) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      if (keep) into.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

std::string text_field(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

struct CodeTable::Context {
  ~Context() {
    end();
    for (int* fd : {&requests, &replies, &out, &err, &status}) close_fd(*fd);
  }
  void end() {
    if (!ended.exchange(true) && reaper > 0) kill_tree(reaper);
  }
  std::string id, language;
  pid_t reaper = -1, pid = -1;
  int requests = -1, replies = -1, out = -1, err = -1, status = -1;
  std::mutex running;  // held while a cell runs
  std::atomic<bool> ended{false};
  std::size_t cells = 0;  // successful cells run in this interpreter (replayed ones too)
};

// What one cell left: its output, the driver's reply line, and how it ended.
struct CodeTable::Cell {
  Cell(std::size_t head, std::size_t tail) : out(head, tail), err(head, tail) {}
  bool keep = true;  // false for a replayed cell: output read and dropped
  OutputBuffer out, err;
  std::string reply;
  bool interrupted = false;
  bool killed = false;  // did not come back within kGrace of SIGINT
  bool exited = false;  // the interpreter ended by itself
  int wait_status = -1;
};

CodeTable::CodeTable(const AgentConfig& config) : config_(config) {}

CodeTable::~CodeTable() { kill_all(); }

std::shared_ptr<CodeTable::Context> CodeTable::start(const std::string& id, const std::string& language) {
  std::string name = program_of(language);
  std::string program = find_program(name, config_.environment);
  if (program.empty())
    throw SandboxError(codes::kSpawnFailed, "this sandbox has no " + name + " (looked in its PATH) to run " + language +
                                                " code; install it in the box or use another language");
  int req[2], rep[2], out[2], err[2];
  int* pairs[] = {req, rep, out, err};
  for (int i = 0; i < 4; ++i) {
    if (pipe2(pairs[i], O_CLOEXEC) != 0) {
      int e = errno;
      for (int j = 0; j < i; ++j) close(pairs[j][0]), close(pairs[j][1]);
      throw SandboxError(codes::kSpawnFailed, os::errno_text("pipe", e));
    }
  }
  SpawnSpec spec;
  if (language == "python") spec.argv = {program, "-c", kPythonDriver};
  else if (language == "javascript") spec.argv = {program, "-e", kNodeDriver};
  else spec.argv = {program, "--noprofile", "--norc", "-c", kBashDriver};
  spec.env = config_.environment;
  if (std::none_of(spec.env.begin(), spec.env.end(), [](const std::string& e) { return e.rfind("MPLBACKEND=", 0) == 0; }))
    spec.env.push_back("MPLBACKEND=Agg");  // figures are saved, never shown
  spec.stdout_fd = out[1];
  spec.stderr_fd = err[1];
  spec.extra_fds = {req[0], rep[1]};
  Spawned spawned;
  try {
    spawned = spawn_supervised(spec);
  } catch (...) {
    for (int* p : pairs) close(p[0]), close(p[1]);
    throw;
  }
  close(req[0]), close(rep[1]), close(out[1]), close(err[1]);
  auto c = std::make_shared<Context>();
  c->id = id;
  c->language = language;
  c->reaper = spawned.reaper;
  c->pid = spawned.pid;
  c->requests = req[1];
  c->replies = rep[0];
  c->out = out[0];
  c->err = err[0];
  c->status = spawned.status_fd;
  for (int fd : {c->requests, c->replies, c->out, c->err, c->status}) set_nonblocking(fd);
  return c;
}

bool CodeTable::exchange(Context& c, const std::string& code, std::int64_t timeout_ms, AgentRequest* request, Cell& cell) {
  std::string frame;
  if (c.language == "bash") {
    if (code.find('\0') != std::string::npos) throw SandboxError(codes::kInvalidArguments, "bash code cannot hold a NUL byte");
    frame = code + '\0';
  } else {
    frame = json{{"code", code}, {"result_chars", config_.inline_output_chars / 2}, {"max_images", kMaxImages},
                 {"max_image_bytes", kMaxImageBytes}}
                .dump(-1, ' ', false, json::error_handler_t::replace) +
            "\n";
  }
  if (c.ended || !process_alive(c.pid)) {
    cell.exited = true;
    return false;
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto grace = Clock::time_point::max();
  std::size_t written = 0;
  std::string chunk;
  int out = c.out, err = c.err;
  for (;;) {
    auto now = Clock::now();
    if (!cell.interrupted && (now >= deadline || (request && request->cancelled()))) {
      signal_tree(c.reaper, SIGINT);
      cell.interrupted = true;
      grace = now + kGrace;
    }
    if (now >= grace || cell.reply.size() > kMaxReplyBytes) {
      cell.killed = true;
      c.end();
      return false;
    }
    pollfd fds[5] = {{out, POLLIN, 0}, {err, POLLIN, 0}, {c.replies, POLLIN, 0}, {c.status, POLLIN, 0},
                     {written < frame.size() ? c.requests : -1, POLLOUT, 0}};
    auto until = std::min(cell.interrupted ? grace : deadline, now + std::chrono::milliseconds(50));
    int wait = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    if (poll(fds, 5, wait) < 0 && errno != EINTR) throw SandboxError(codes::kInternal, os::errno_text("poll", errno));
    if (fds[0].revents) {
      chunk.clear();
      if (!read_some(out, chunk, cell.keep)) out = -1;
      cell.out.append(chunk);
    }
    if (fds[1].revents) {
      chunk.clear();
      if (!read_some(err, chunk, cell.keep)) err = -1;
      cell.err.append(chunk);
    }
    if (fds[2].revents) read_some(c.replies, cell.reply, true);
    if (cell.reply.find('\n') != std::string::npos) break;
    if (fds[3].revents) {  // the interpreter ended: its last words are read below
      std::string status;
      read_some(c.status, status, true);
      if (status.size() >= sizeof(int)) std::memcpy(&cell.wait_status, status.data(), sizeof(int));
      cell.exited = true;
      c.end();
      break;
    }
    if (fds[4].revents & (POLLERR | POLLHUP)) {
      cell.exited = true;
      c.end();
      break;
    }
    if (fds[4].revents & POLLOUT) {
      ssize_t n = ::write(c.requests, frame.data() + written, frame.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
    }
  }
  // What the cell printed before it answered is in the pipes by now.
  for (int* fd : {&out, &err}) {
    if (*fd < 0) continue;
    chunk.clear();
    read_some(*fd, chunk, cell.keep);
    (*fd == c.out ? cell.out : cell.err).append(chunk);
  }
  return !cell.exited;
}

namespace {

// The cell's error as the driver reported it, or as its exit status says
// (bash), with an interruption said in words; null when it succeeded.
json cell_error(const std::string& language, const json& reply, bool interrupted, std::int64_t timeout_ms, bool cancelled) {
  json error = nullptr;
  if (language == "bash") {
    if (reply.is_number_integer() && reply.get<int>() != 0)
      error = {{"name", "exit status"}, {"value", std::to_string(reply.get<int>())}, {"traceback", ""}};
  } else if (reply.is_object() && reply.contains("error") && reply["error"].is_object()) {
    const json& e = reply["error"];
    error = {{"name", text_field(e, "name")}, {"value", text_field(e, "value")}, {"traceback", text_field(e, "traceback")}};
  }
  if (interrupted && !error.is_null()) {
    std::string why = cancelled ? "the call was cancelled" : "it ran past timeout_ms (" + std::to_string(timeout_ms) + " ms)";
    error["value"] = "interrupted (SIGINT): " + why + "; the context and its variables are kept" +
                     (error["value"].get<std::string>().empty() ? "" : " [" + error["value"].get<std::string>() + "]");
  }
  return error;
}

}  // namespace

json CodeTable::create(const json& params) {
  std::string id = require_string(params, "context");
  std::string language = require_string(params, "language");
  program_of(language);
  {
    std::lock_guard lock(mutex_);
    auto it = contexts_.find(id);
    if (it != contexts_.end()) {
      if (it->second->language != language)
        throw SandboxError(codes::kInvalidArguments, "context '" + id + "' is a " + it->second->language + " context");
      return {{"context", id}, {"language", language}, {"created", false}};
    }
    if (contexts_.size() >= kMaxContexts)
      throw SandboxError(codes::kInvalidArguments, "this sandbox already has " + std::to_string(kMaxContexts) +
                                                       " code contexts; delete one with code_context_delete");
  }
  auto c = start(id, language);
  std::lock_guard lock(mutex_);
  contexts_.emplace(id, c);  // a racing create of the same id keeps the first; this one ends with c
  return {{"context", id}, {"language", language}, {"created", true}};
}

void CodeTable::forget(const std::string& id) {
  std::shared_ptr<Context> gone;
  {
    std::lock_guard lock(mutex_);
    auto it = contexts_.find(id);
    if (it == contexts_.end()) return;
    gone = std::move(it->second);
    contexts_.erase(it);
  }
  gone->end();
}

json CodeTable::run(AgentRequest& request) {
  const json& params = request.params();
  std::string id = require_string(params, "context");
  std::string code = param_string(params, "code", "");
  std::int64_t timeout_ms = std::clamp<std::int64_t>(param_int(params, "timeout_ms", contract::kDefaultTimeoutMs), 1, kMaxTimeoutMs);
  bool create = params.is_object() && params.contains("create") && params["create"].is_boolean() && params["create"].get<bool>();
  std::shared_ptr<Context> c;
  {
    std::lock_guard lock(mutex_);
    auto it = contexts_.find(id);
    if (it != contexts_.end()) c = it->second;
  }
  auto started = Clock::now();
  std::size_t replayed = 0, replay_failed = 0;
  bool created = false;
  if (!c) {
    if (!create) throw SandboxError(codes::kContextNotFound, "this sandbox runs no code context '" + id + "'");
    this->create(json{{"context", id}, {"language", require_string(params, "language")}});
    std::lock_guard lock(mutex_);
    c = contexts_.at(id);
    created = true;
  }
  std::unique_lock running(c->running, std::try_to_lock);
  if (!running.owns_lock())
    throw SandboxError(codes::kContextBusy, "context '" + id + "' is running a cell; wait for it or interrupt it (cancel the call)");
  if (created && params.contains("replay") && params["replay"].is_array()) {
    for (const auto& earlier : params["replay"]) {
      if (!earlier.is_string()) continue;
      Cell cell(0, 0);
      cell.keep = false;
      bool alive = exchange(*c, earlier.get<std::string>(), timeout_ms, &request, cell);
      if (!alive) {
        forget(id);
        throw SandboxError(codes::kSpawnFailed, "replaying context '" + id + "' ended its interpreter at cell " +
                                                    std::to_string(replayed + replay_failed + 1) +
                                                    (cell.killed ? " (it did not stop after SIGINT)" : ""));
      }
      json reply = json::parse(cell.reply, nullptr, false);
      if (cell_error(c->language, reply, false, timeout_ms, false).is_null()) ++replayed, ++c->cells;
      else ++replay_failed;
      if (request.cancelled()) throw SandboxError(codes::kInvalidArguments, "cancelled while replaying context '" + id + "'");
    }
  }
  Cell cell(config_.process_head_bytes, config_.process_tail_bytes);
  auto ran = Clock::now();
  bool alive = exchange(*c, code, timeout_ms, &request, cell);
  json reply = cell.reply.empty() ? json() : json::parse(cell.reply.substr(0, cell.reply.find('\n')), nullptr, false);
  json error = alive ? cell_error(c->language, reply, cell.interrupted, timeout_ms, request.cancelled()) : json();
  if (!alive) {
    std::string why = cell.killed ? (cell.reply.size() > kMaxReplyBytes ? "its answer exceeded " + std::to_string(kMaxReplyBytes >> 20) + " MiB"
                                                                          : "it did not stop within 2 s of SIGINT")
                                  : "it exited" + (cell.wait_status >= 0 && WIFEXITED(cell.wait_status)
                                                       ? " with status " + std::to_string(WEXITSTATUS(cell.wait_status))
                                                       : std::string());
    error = {{"name", cell.killed ? "Killed" : "Exited"},
             {"value", "the " + c->language + " interpreter was lost: " + why +
                           "; its variables are gone, and the next code_run starts it again and replays the context's "
                           "successful cells"},
             {"traceback", ""}};
    forget(id);
  } else if (error.is_null() && cell.interrupted) {
    error = {{"name", "Interrupted"}, {"value", "interrupted (SIGINT) as the cell ended; the context is kept"}, {"traceback", ""}};
  }
  if (error.is_null()) ++c->cells;
  auto [out_budget, err_budget] = split_budget(cost_bound(cell.out.total()), cost_bound(cell.err.total()), config_.inline_output_chars);
  auto [out_lines, err_lines] = split_budget(cell.out.lines() + 1, cell.err.lines() + 1, kMaxShownLines);
  auto out = cell.out.inline_view(out_budget, out_lines);
  auto err = cell.err.inline_view(err_budget, err_lines);
  json images = json::array();
  json result = nullptr;
  bool truncated = out.truncated || err.truncated;
  if (reply.is_object()) {
    if (reply.contains("result") && reply["result"].is_string()) result = reply["result"];
    if (reply.contains("images") && reply["images"].is_array())
      for (const auto& image : reply["images"])
        if (image.is_string() && images.size() < kMaxImages) images.push_back(image);
    auto flag = [&reply](const char* key) { return reply.contains(key) && reply[key].is_boolean() && reply[key].get<bool>(); };
    truncated = truncated || flag("result_truncated") || flag("images_truncated");
  }
  auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  json r = {{"context", id},       {"language", c->language}, {"stdout", out.text},  {"stderr", err.text},
            {"result", result},    {"images", images},       {"error", error},      {"interrupted", cell.interrupted},
            {"lost", !alive},      {"created", created},      {"replayed", replayed}, {"cells", c->cells},
            {"duration_ms", ms(Clock::now() - ran)}, {"total_ms", ms(Clock::now() - started)}, {"truncated", truncated}};
  if (replay_failed) r["replay_failed"] = replay_failed;
  return r;
}

json CodeTable::remove(const json& params) {
  std::string id = require_string(params, "context");
  bool had;
  {
    std::lock_guard lock(mutex_);
    had = contexts_.count(id) > 0;
  }
  forget(id);
  return {{"context", id}, {"deleted", had}};
}

json CodeTable::list(const json&) {
  json out = json::array();
  std::lock_guard lock(mutex_);
  for (const auto& [id, c] : contexts_)
    out.push_back({{"context", id}, {"language", c->language}, {"running", !c->ended && process_alive(c->pid)},
                   {"cells", c->cells}});
  return {{"contexts", out}};
}

void CodeTable::kill_all() {
  std::map<std::string, std::shared_ptr<Context>> all;
  {
    std::lock_guard lock(mutex_);
    all.swap(contexts_);
  }
  for (auto& [id, c] : all) c->end();
}

void register_code_methods(MethodTable& table, CodeTable& code) {
  table[contract::methods::kCodeCreate] = [&code](AgentRequest& r) { return code.create(r.params()); };
  table[contract::methods::kCodeRun] = [&code](AgentRequest& r) { return code.run(r); };
  table[contract::methods::kCodeDelete] = [&code](AgentRequest& r) { return code.remove(r.params()); };
  table[contract::methods::kCodeList] = [&code](AgentRequest& r) { return code.list(r.params()); };
}

}  // namespace agentbox::agent
