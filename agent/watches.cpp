#include "agent/watches.h"

#include "agent/file_paths.h"
#include "agent/output_buffer.h"
#include "os/errno_text.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <optional>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace agentbox::agent {

using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t kMask = IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK;
// Events that come together (a save, a build step) are answered together.
constexpr auto kSettle = std::chrono::milliseconds(50);
constexpr std::int64_t kMaxWaitMs = 300'000;

bool is_under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

}  // namespace

struct WatchTable::Watch {
  Watch(const std::string& glob_text) : glob(glob_text) {}
  std::string id, root, glob_text;
  PathGlob glob;
  bool recursive = true;
  int fd = -1;
  bool open = true;                     // false once the fd is closed or the root went away
  std::map<int, std::string> dirs;      // inotify wd -> directory
  std::size_t unwatched = 0;            // directories over kMaxDirectories or the kernel's limit
  std::deque<Event> events;
  std::uint64_t next_seq = 1;
  std::uint64_t dropped_through = 0;    // events up to this seq fell off the queue
  std::deque<std::uint64_t> kernel_overflows;  // the kernel lost events after these seqs
  std::uint64_t read_to = 0;            // where the last file_changes ended: the default cursor
  struct Move {
    std::uint32_t cookie;
    std::string path;
  };
  std::optional<Move> pending_move;     // IN_MOVED_FROM waiting for its IN_MOVED_TO
  Clock::time_point last_event = Clock::now(), last_used = Clock::now();
  std::condition_variable changed;
};

WatchTable::~WatchTable() {
  std::lock_guard lock(mutex_);
  for (auto& [id, w] : watches_)
    if (w->open) io_.close_later(w->fd);
}

void WatchTable::push(Watch& w, std::string path, const char* type, std::string from) {
  auto relative = [&w](const std::string& p) { return p.size() > w.root.size() ? p.substr(w.root.size() + 1) : std::string(); };
  if (!w.glob.matches(relative(path)) && (from.empty() || !w.glob.matches(relative(from)))) return;
  // A write is many IN_MODIFY: one event while it is the latest for the
  // path and not yet read.
  if (std::strcmp(type, "modified") == 0 && !w.events.empty() && w.events.back().path == path &&
      w.events.back().seq > w.read_to &&
      (std::strcmp(w.events.back().type, "modified") == 0 || std::strcmp(w.events.back().type, "created") == 0))
    return;
  w.events.push_back({w.next_seq++, std::move(path), type, std::move(from)});
  if (w.events.size() > kMaxQueuedEvents) {
    w.dropped_through = w.events.front().seq;
    w.events.pop_front();
  }
  w.last_event = Clock::now();
  w.changed.notify_all();
}

void WatchTable::flush_pending_move(Watch& w) {
  if (!w.pending_move) return;
  // Moved out of the watched tree: gone, as far as the watch can see.
  std::string path = std::move(w.pending_move->path);
  w.pending_move.reset();
  push(w, std::move(path), "deleted");
}

void WatchTable::add_directory(Watch& w, const std::string& top, bool report_contents) {
  std::vector<std::string> stack{top};
  while (!stack.empty()) {
    std::string dir = std::move(stack.back());
    stack.pop_back();
    if (w.dirs.size() >= kMaxDirectories) {
      ++w.unwatched;
      continue;
    }
    int wd = inotify_add_watch(w.fd, dir.c_str(), kMask);
    if (wd < 0) {
      if (errno == ENOSPC) ++w.unwatched;  // the kernel's per-user limit
      continue;
    }
    w.dirs[wd] = dir;
    if (!w.recursive && !report_contents) continue;
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = dir + "/" + name;
      // What was made in a new directory before its watch was added.
      if (report_contents) push(w, path, "created");
      struct stat st;
      if (!w.recursive || name == ".git" || lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      stack.push_back(path);
    }
    closedir(d);
  }
}

void WatchTable::on_events(Watch& w, std::string_view bytes) {
  std::size_t at = 0;
  while (at + sizeof(inotify_event) <= bytes.size()) {
    inotify_event ev;
    std::memcpy(&ev, bytes.data() + at, sizeof ev);
    std::size_t size = sizeof(inotify_event) + ev.len;
    if (at + size > bytes.size()) break;  // the kernel writes whole events; never expected
    std::string name = ev.len ? std::string(bytes.data() + at + sizeof(inotify_event)) : std::string();
    at += size;
    if (ev.mask & IN_Q_OVERFLOW) {
      if (w.kernel_overflows.size() >= 64) w.kernel_overflows.pop_front();
      w.kernel_overflows.push_back(w.next_seq - 1);
      w.changed.notify_all();
      continue;
    }
    auto it = w.dirs.find(ev.wd);
    if (it == w.dirs.end()) continue;
    if (ev.mask & IN_IGNORED) {
      w.dirs.erase(it);
      continue;
    }
    std::string dir = it->second;
    std::string path = name.empty() ? dir : dir + "/" + name;
    bool is_dir = ev.mask & IN_ISDIR;
    if (w.pending_move && !((ev.mask & IN_MOVED_TO) && ev.cookie == w.pending_move->cookie)) flush_pending_move(w);
    if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
      if (dir == w.root) {  // the watched directory itself went away: the watch ends here
        push(w, dir, (ev.mask & IN_DELETE_SELF) ? "deleted" : "moved");
        w.open = false;
        io_.close_later(w.fd);
      }
      continue;  // a subdirectory's own end is reported by its parent
    }
    if (ev.mask & IN_CREATE) {
      push(w, path, "created");
      if (is_dir && w.recursive) add_directory(w, path, true);
    } else if (ev.mask & (IN_MODIFY | IN_CLOSE_WRITE)) {
      if (!is_dir) push(w, path, "modified");
    } else if (ev.mask & IN_DELETE) {
      push(w, path, "deleted");
    } else if (ev.mask & IN_MOVED_FROM) {
      w.pending_move = Watch::Move{ev.cookie, path};
    } else if (ev.mask & IN_MOVED_TO) {
      if (w.pending_move) {
        std::string from = std::move(w.pending_move->path);
        w.pending_move.reset();
        if (is_dir) {  // its watches keep their wds: their paths move with it
          for (auto& [wd, d] : w.dirs)
            if (is_under(d, from)) d = path + d.substr(from.size());
        }
        push(w, path, "moved", std::move(from));
      } else {  // moved in from outside the tree: new here
        push(w, path, "created");
        if (is_dir && w.recursive) add_directory(w, path, true);
      }
    }
  }
}

json WatchTable::add(const json& params) {
  std::string cwd = resolve_(param_string(params, "session", "default")).cwd;
  std::string root = normalize_path(file_param_path(params, "path", cwd));
  struct stat st;
  if (stat(root.c_str(), &st) != 0) throw file_error(errno, "watch", root);
  if (!S_ISDIR(st.st_mode)) throw SandboxError(codes::kInvalidArguments, root + " is not a directory; watch the directory it is in");
  auto w = std::make_shared<Watch>(param_string(params, "glob", ""));
  w->root = root;
  w->glob_text = param_string(params, "glob", "");
  w->recursive = params.value("recursive", true);
  w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (w->fd < 0) {
    throw SandboxError(errno == EMFILE ? codes::kInvalidArguments : codes::kInternal,
                       os::errno_text("inotify_init1 (too many watches in this sandbox's user?)", errno));
  }
  json result;
  std::string replaced;
  {
    std::lock_guard lock(mutex_);
    // Random ids: a new agent (after a teardown or restore) must not hand
    // out an id an old watch had.
    char id[16];
    std::snprintf(id, sizeof id, "watch-%08x", static_cast<unsigned>(random_()));
    w->id = id;
    add_directory(*w, root, false);
    if (watches_.size() >= kMaxWatches) {
      auto oldest = std::min_element(watches_.begin(), watches_.end(),
                                     [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
      replaced = oldest->first;
      if (oldest->second->open) io_.close_later(oldest->second->fd);
      oldest->second->open = false;
      oldest->second->changed.notify_all();
      watches_.erase(oldest);
    }
    watches_[w->id] = w;
    result = {{"watch_id", w->id}, {"path", root}, {"recursive", w->recursive}, {"directories", w->dirs.size()}};
    if (w->unwatched) result["unwatched_directories"] = w->unwatched;
  }
  if (!replaced.empty()) result["replaced"] = replaced;
  std::weak_ptr<Watch> weak = w;
  io_.watch(
      w->fd,
      [this, weak](std::string_view bytes) {
        if (auto watch = weak.lock()) {
          std::lock_guard lock(mutex_);
          on_events(*watch, bytes);
        }
      },
      [this, weak] {
        if (auto watch = weak.lock()) {
          std::lock_guard lock(mutex_);
          watch->open = false;
          watch->changed.notify_all();
        }
      });
  return result;
}

std::shared_ptr<WatchTable::Watch> WatchTable::find(const json& params) {
  std::string id = require_string(params, "watch_id");
  std::lock_guard lock(mutex_);
  auto it = watches_.find(id);
  if (it == watches_.end())
    throw SandboxError(codes::kWatchNotFound, "no watch '" + id +
                                                  "' in this sandbox (a watch ends with its sandbox's teardown or "
                                                  "restore, or when 16 newer ones replace it; file_watch again)");
  return it->second;
}

json WatchTable::changes(AgentRequest& request) {
  const json& params = request.params();
  auto w = find(params);
  auto wait = std::chrono::milliseconds(std::clamp<std::int64_t>(param_int(params, "wait_ms", 0), 0, kMaxWaitMs));
  request.on_cancel([w, this] {
    std::lock_guard lock(mutex_);
    w->changed.notify_all();
  });
  std::unique_lock lock(mutex_);
  w->last_used = Clock::now();
  std::int64_t given = param_int(params, "cursor", -1);
  std::uint64_t cursor = given < 0 ? w->read_to : static_cast<std::uint64_t>(given);
  auto deadline = Clock::now() + wait;
  auto has_new = [&] { return w->next_seq - 1 > cursor; };
  for (;;) {
    if (request.cancelled() || !w->open) break;
    auto now = Clock::now();
    if (has_new()) {
      // Let the rest of a burst in before answering.
      if (now - w->last_event >= kSettle || now >= deadline) break;
      w->changed.wait_until(lock, std::min(deadline, w->last_event + kSettle));
      continue;
    }
    if (now >= deadline) break;
    w->changed.wait_until(lock, deadline);
  }
  flush_pending_move(*w);
  json events = json::array();
  std::uint64_t next = cursor;
  std::size_t cost = 0;
  for (const auto& e : w->events) {
    if (e.seq <= cursor) continue;
    std::size_t c = shown_cost(e.path) + shown_cost(e.from) + 40;
    if (events.size() >= kMaxEventsPerPage || (!events.empty() && cost + c > contract::kInlineOutputChars / 2)) break;
    json j = {{"path", e.path}, {"type", e.type}};
    if (!e.from.empty()) j["from"] = e.from;
    events.push_back(std::move(j));
    cost += c;
    next = e.seq;
  }
  bool more = next < w->next_seq - 1;
  if (!more) next = w->next_seq - 1;  // nothing kept past here (filtered or dropped)
  bool overflowed = w->dropped_through > cursor;
  for (std::uint64_t at : w->kernel_overflows) overflowed |= at >= cursor && at <= next;
  w->read_to = std::max(w->read_to, next);
  json result = {{"watch_id", w->id}, {"events", std::move(events)}, {"next_cursor", next},
                 {"overflowed", overflowed}, {"more", more}, {"watching", w->open}};
  if (w->unwatched) result["unwatched_directories"] = w->unwatched;
  return result;
}

void register_watch_methods(MethodTable& table, WatchTable& watches) {
  table[contract::methods::kWatchAdd] = [&watches](AgentRequest& r) { return watches.add(r.params()); };
  table[contract::methods::kWatchChanges] = [&watches](AgentRequest& r) { return watches.changes(r); };
}

}  // namespace agentbox::agent
