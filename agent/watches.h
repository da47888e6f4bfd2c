// File watches (agent side): file_watch puts inotify watches on a directory
// (and on every directory below it when recursive, new ones included);
// file_changes pages the events from a cursor and can wait for the next.
// Each watch has its own inotify instance, read on the IoLoop, and a
// bounded queue: what falls off it, and the kernel's own overflow, is
// reported as `overflowed`, never silently lost. Watches live in the agent,
// so they end with the sandbox (docs/design.md, "File watch").
#pragma once

#include "agent/processes.h"
#include "agent/io.h"
#include "agent/methods.h"
#include "agent/path_glob.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

namespace agentbox::agent {

class WatchTable {
 public:
  static constexpr std::size_t kMaxWatches = 16;          // a 17th replaces the one unused longest
  static constexpr std::size_t kMaxQueuedEvents = 10'000;  // per watch
  static constexpr std::size_t kMaxDirectories = 8'192;    // inotify watches per file_watch
  static constexpr std::size_t kMaxEventsPerPage = 500;

  WatchTable(IoLoop& io, SessionResolver resolve) : io_(io), resolve_(std::move(resolve)) {}
  ~WatchTable();
  WatchTable(const WatchTable&) = delete;
  WatchTable& operator=(const WatchTable&) = delete;

  json add(const json& params);       // file.watch {path, recursive?, glob?}
  json changes(AgentRequest& request);  // file.changes {watch_id, cursor?, wait_ms?}

 private:
  struct Event {
    std::uint64_t seq;
    std::string path;
    const char* type;  // created, modified, deleted, moved
    std::string from;  // moved: the old path
  };
  struct Watch;
  std::shared_ptr<Watch> find(const json& params);
  void on_events(Watch& w, std::string_view bytes);
  void add_directory(Watch& w, const std::string& dir, bool report_contents);
  void push(Watch& w, std::string path, const char* type, std::string from = {});
  void flush_pending_move(Watch& w);

  IoLoop& io_;
  SessionResolver resolve_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Watch>> watches_;
  std::mt19937 random_{std::random_device{}()};
};

void register_watch_methods(MethodTable& table, WatchTable& watches);

}  // namespace agentbox::agent
