#include "app/replay.h"

#include "rpc/framing.h"
#include "rpc/json_parse.h"
#include "rpc/message.h"
#include "server/transcript.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>

#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cstring>

namespace bp = boost::process::v2;
namespace asio = boost::asio;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace agentbox::app {

// The transcript format is the server's (--record writes it).
using namespace agentbox::server;

namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(20);

// Collects the server's output lines on a thread of its own.
class OutputQueue {
 public:
  explicit OutputQueue(int fd)
      : thread_([this, fd] {
          rpc::LineReader reader(fd, 64 * 1024 * 1024);
          while (auto line = reader.next()) push(std::move(line->text));
          std::lock_guard lock(mutex_);
          closed_ = true;
          cv_.notify_all();
        }) {}
  ~OutputQueue() { thread_.join(); }

  // The next line, or nullopt on timeout or end of output.
  std::optional<std::string> pop(Clock::duration timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !lines_.empty() || closed_; });
    if (lines_.empty()) return std::nullopt;
    std::string line = std::move(lines_.front());
    lines_.pop_front();
    return line;
  }
  bool closed() {
    std::lock_guard lock(mutex_);
    return closed_ && lines_.empty();
  }

 private:
  void push(std::string line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
    cv_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool closed_ = false;
  std::thread thread_;
};

struct Session {
  std::vector<std::string> differences;
  std::map<std::string, json> captures;
  void differ(int line, const std::string& what) {
    differences.push_back("line " + std::to_string(line) + ": " + what);
  }
};

int signal_number(const std::string& name) {
  if (name == "SIGTERM") return SIGTERM;
  if (name == "SIGINT") return SIGINT;
  if (name == "SIGKILL") return SIGKILL;
  throw std::runtime_error("unknown signal " + name);
}

// Receives as many messages as there are consecutive expectations and matches
// them in any order: concurrent replies and notifications may interleave.
void expect_group(const std::vector<const TranscriptStep*>& group, OutputQueue& output, Session& session,
                  bool loosen) {
  std::vector<json> actual;
  for (std::size_t i = 0; i < group.size(); ++i) {
    auto line = output.pop(kReplyTimeout);
    if (!line) {
      session.differ(group[i]->line, "no message arrived (timed out or the server exited); expected " +
                                         rpc::serialize(group[i]->value));
      return;
    }
    rpc::ParsedJson parsed = rpc::parse_json(*line);
    if (!parsed.ok()) {
      session.differ(group[i]->line, "the server wrote a line that is not JSON (or nests deeper than " +
                                         std::to_string(rpc::kMaxNestingDepth) + " levels): " + line->substr(0, 200));
      return;
    }
    actual.push_back(std::move(parsed.value));
  }
  std::vector<bool> used(actual.size(), false);
  for (const auto* step : group) {
    json expected = loosen ? loosen_recorded(step->value) : step->value;
    std::string closest;
    bool found = false;
    for (std::size_t i = 0; i < actual.size() && !found; ++i) {
      if (used[i]) continue;
      auto captures = session.captures;
      auto diff = match_json(expected, actual[i], captures);
      if (!diff) {
        used[i] = true;
        session.captures = std::move(captures);
        found = true;
      } else if (closest.empty() || (actual[i].value("id", json()) == expected.value("id", json()))) {
        closest = *diff;
      }
    }
    if (!found) session.differ(step->line, "no message matched: " + closest);
  }
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!used[i]) session.differ(group.front()->line, "unexpected message: " + rpc::serialize(actual[i]).substr(0, 300));
}

// Reaps the server ourselves (waitpid) rather than through the process
// object, whose cached exit code raced with reaping here; the object is
// detached afterwards so it does not wait a second time.
bool wait_exit(bp::process& server, long long ms, int line, Session& session) {
  auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    int status = 0;
    pid_t pid = ::waitpid(server.id(), &status, WNOHANG);
    if (pid == server.id()) {
      server.detach();
      if (WIFSIGNALED(status))
        session.differ(line, std::string("server was killed by ") + strsignal(WTERMSIG(status)));
      else if (WEXITSTATUS(status) != 0)
        session.differ(line, "server exited with code " + std::to_string(WEXITSTATUS(status)));
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  session.differ(line, "server did not exit within " + std::to_string(ms) + " ms");
  return false;
}

}  // namespace

int replay_main(const std::string& self, const std::vector<std::string>& args) {
  std::string file;
  std::vector<std::string> extra;
  bool loosen = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      extra.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (args[i] == "--loose") loosen = true;
    else if (file.empty()) file = args[i];
    else throw std::invalid_argument("unexpected argument '" + args[i] + "'");
  }
  if (file.empty()) throw std::invalid_argument("usage: agentbox replay [--loose] FILE [-- SERVE_ARGS...]");
  std::ifstream in(file);
  if (!in) throw std::invalid_argument("cannot read " + file);
  std::stringstream text;
  text << in.rdbuf();
  Transcript transcript = parse_transcript(text.str());

  // $TMPDIR (else /tmp); a 0700 directory is fine, sandboxes start under any parent.
  std::string dir_template = (fs::temp_directory_path() / "agentbox-replay-XXXXXX").string();
  if (!mkdtemp(dir_template.data()))
    throw std::runtime_error("cannot create a directory from " + dir_template + ": " + std::strerror(errno));
  fs::path state_dir = fs::path(dir_template) / "state";
  fs::path stderr_file = fs::path(dir_template) / "server.stderr";

  std::vector<std::string> server_args = {"serve", "--state-dir", state_dir.string()};
  server_args.insert(server_args.end(), transcript.server_args.begin(), transcript.server_args.end());
  server_args.insert(server_args.end(), extra.begin(), extra.end());
  for (const auto& [key, value] : transcript.env) setenv(key.c_str(), value.c_str(), 1);

  asio::io_context context;
  asio::writable_pipe to_server(context);
  asio::readable_pipe from_server(context);
  FILE* err = std::fopen(stderr_file.c_str(), "w");
  if (!err) throw std::runtime_error("cannot create " + stderr_file.string());
  bp::process server(context, self, server_args, bp::process_stdio{to_server, from_server, err});
  std::fclose(err);
  int out_fd = from_server.native_handle();
  Session session;
  {
    OutputQueue output(out_fd);
    auto send_line = [&](const std::string& line, int number) {
      if (rpc::write_all(to_server.native_handle(), line + "\n") != 0)
        session.differ(number, "could not write to the server (it exited?)");
    };
    std::vector<const TranscriptStep*> group;
    auto flush = [&] {
      if (!group.empty()) expect_group(group, output, session, loosen);
      group.clear();
    };
    bool exited = false;
    for (const auto& step : transcript.steps) {
      using Kind = TranscriptStep::Kind;
      if (step.kind == Kind::Expect) {
        group.push_back(&step);
        continue;
      }
      flush();
      switch (step.kind) {
        case Kind::Send: send_line(rpc::serialize(substitute_captures(step.value, session.captures)), step.line); break;
        case Kind::SendRaw: send_line(step.value.get<std::string>(), step.line); break;
        case Kind::SendOversized: send_line(std::string(step.value.get<std::size_t>(), 'x'), step.line); break;
        case Kind::Sleep: std::this_thread::sleep_for(std::chrono::milliseconds(step.ms)); break;
        case Kind::Silence:
          if (auto line = output.pop(std::chrono::milliseconds(step.ms)))
            session.differ(step.line, "expected silence, got " + line->substr(0, 300));
          break;
        case Kind::CloseInput:
          to_server.close();
          exited = wait_exit(server, step.ms, step.line, session);
          break;
        case Kind::Signal:
          ::kill(server.id(), signal_number(step.value.get<std::string>()));
          exited = wait_exit(server, step.ms, step.line, session);
          break;
        case Kind::Expect: break;
      }
      if (exited) break;
    }
    flush();
    if (!exited) {
      if (to_server.is_open()) to_server.close();
      int last = transcript.steps.empty() ? 0 : transcript.steps.back().line;
      if (!wait_exit(server, 3000, last, session)) server.terminate();
    }
    while (auto extra_line = output.pop(std::chrono::milliseconds(0)))
      session.differ(0, "unexpected message after the transcript ended: " + extra_line->substr(0, 300));
  }

  if (session.differences.empty()) {
    std::cout << file << ": OK (" << transcript.steps.size() << " steps)\n";
    fs::remove_all(dir_template);
    return 0;
  }
  std::cout << file << ": " << session.differences.size() << " difference(s)\n";
  for (const auto& d : session.differences) std::cout << "  " << d << "\n";
  std::ifstream log(stderr_file);
  std::cout << "--- server stderr (" << stderr_file.string() << ") ---\n" << log.rdbuf() << "\n";
  return 1;
}

}  // namespace agentbox::app
