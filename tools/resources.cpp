#include "tools/resources.h"

#include "contract/agent_methods.h"
#include "contract/errors.h"
#include "sandbox/sandboxes.h"

#include <spdlog/spdlog.h>

#include <set>
#include <vector>

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;
namespace m = contract::methods;

constexpr std::string_view kPrefix = "file:///workspace";
constexpr milliseconds kAgentTimeout{30'000};
constexpr std::int64_t kWaitMs = 10'000;        // one long poll of the watch
constexpr milliseconds kIdlePoll{500};           // how often a stopped sandbox is looked for

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '/';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The agent's answers come from inside the box: a string where a string
// should be, or nothing.
std::string string_field(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// json::value() throws on a value of another type; what the box sends is
// read with the fallback instead (a watcher thread must never throw).
bool bool_field(const json& object, const char* key, bool fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

ResourceError not_workspace_uri(const std::string& uri) {
  return ResourceError(ResourceError::Kind::Invalid,
                       "not a workspace file URI: " + uri + " (resources are file:///workspace/<path>)", json{{"uri", uri}});
}

ResourceError not_found(const std::string& uri, const std::string& why) {
  return ResourceError(ResourceError::Kind::NotFound, "resource not found: " + uri + " (" + why + ")", json{{"uri", uri}});
}

}  // namespace

std::optional<std::string> workspace_path_of(const std::string& uri) {
  if (uri.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  std::string rest = uri.substr(kPrefix.size());
  if (!rest.empty() && rest[0] != '/') return std::nullopt;  // file:///workspacefoo
  std::string decoded;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    char c = rest[i];
    if (c == '?' || c == '#') return std::nullopt;
    if (c == '%') {
      if (i + 2 >= rest.size()) return std::nullopt;
      int hi = hex_value(rest[i + 1]), lo = hex_value(rest[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0') return std::nullopt;
    decoded += c;
  }
  // Components: no "." or "..", no empty ones but a trailing slash.
  std::string path = "/workspace";
  std::size_t start = 1;
  while (start <= decoded.size() && !decoded.empty()) {
    std::size_t end = decoded.find('/', start);
    if (end == std::string::npos) end = decoded.size();
    std::string part = decoded.substr(start, end - start);
    if (part == "." || part == "..") return std::nullopt;
    if (part.empty() && end != decoded.size()) return std::nullopt;
    if (!part.empty()) path += "/" + part;
    start = end + 1;
  }
  return path;
}

std::string resource_uri(const std::string& path) {
  static const char* digits = "0123456789ABCDEF";
  std::string rest = path.compare(0, 10, "/workspace") == 0 ? path.substr(10) : path;
  std::string uri(kPrefix);
  for (unsigned char c : rest) {
    if (unreserved(c)) {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += digits[c >> 4];
      uri += digits[c & 15];
    }
  }
  return uri;
}

// One conversation's subscriptions and the thread that watches for them.
struct WorkspaceResources::Watcher {
  std::string conversation;
  std::map<std::string, int> uris;  // subscribed URI -> times subscribed; guarded by the owner's mutex_
  std::mutex mutex;                 // below
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;
};

WorkspaceResources::WorkspaceResources(Services services, Changed changed)
    : services_(std::move(services)), changed_(std::move(changed)) {}

WorkspaceResources::~WorkspaceResources() { stop(); }

sandbox::Sandboxes* WorkspaceResources::sandboxes() const {
  if (!services_.sandboxes)
    throw ResourceError(ResourceError::Kind::Unavailable, "this server was started without sandbox support");
  return services_.sandboxes();
}

json WorkspaceResources::templates() {
  return json{{"resourceTemplates",
               json::array({json{{"uriTemplate", std::string(kPrefix) + "/{+path}"},
                                 {"name", "workspace file"},
                                 {"title", "A file of the conversation's sandbox"},
                                 {"description", "Any file under /workspace in this conversation's sandbox, by its path"}}})}};
}

json WorkspaceResources::list(const std::string& conversation, const std::string& cursor) {
  auto* boxes = sandboxes();
  json out = {{"resources", json::array()}};
  if (boxes->status(conversation).sandbox.empty()) return out;  // never had one: nothing to list, none started
  auto lease = boxes->acquire(conversation, {});
  json params = {{"path", "/workspace"}, {"recursive", true}, {"max_depth", 64}, {"max_entries", 1000}};
  if (!cursor.empty()) params["cursor"] = cursor;
  json r;
  try {
    r = lease->agent()->call(m::kFileList, params, kAgentTimeout);
  } catch (const SandboxError& e) {
    if (!cursor.empty() && e.code() == std::string(codes::kInvalidArguments))
      throw ResourceError(ResourceError::Kind::Invalid, "unknown cursor: " + std::string(e.what()), json{{"field", "params.cursor"}});
    throw;
  }
  auto entries = r.find("entries");
  if (entries == r.end() || !entries->is_array()) throw std::runtime_error("file.list answered without entries");
  for (const auto& e : *entries) {
    std::string path = string_field(e, "path");
    if (string_field(e, "type") != "file" || path.compare(0, 11, "/workspace/") != 0) continue;
    json resource = {{"uri", resource_uri(path)}, {"name", path.substr(11)}};
    if (e.contains("size") && e["size"].is_number_unsigned()) resource["size"] = e["size"];
    out["resources"].push_back(std::move(resource));
  }
  if (bool_field(r, "truncated", false) && !string_field(r, "next_cursor").empty()) out["nextCursor"] = string_field(r, "next_cursor");
  return out;
}

json WorkspaceResources::read(const std::string& conversation, const std::string& uri) {
  auto path = workspace_path_of(uri);
  if (!path || *path == "/workspace")
    throw not_workspace_uri(uri);
  auto* boxes = sandboxes();
  if (boxes->status(conversation).sandbox.empty()) throw not_found(uri, "this conversation has no sandbox yet");
  auto lease = boxes->acquire(conversation, {});
  std::string encoding = "utf-8", content, mime;
  std::uint64_t offset = 0;
  for (;;) {
    json r;
    try {
      r = lease->agent()->call(m::kFileRead, json{{"path", *path}, {"offset", offset}, {"encoding", encoding}}, kAgentTimeout);
    } catch (const SandboxError& e) {
      std::string code = e.code();
      if (code == codes::kBinaryFile && encoding == "utf-8" && offset == 0) {
        encoding = "base64";
        continue;
      }
      if (code == codes::kFileNotFound) throw not_found(uri, e.what());
      if (code == codes::kIsDirectory || code == codes::kPermissionDenied || code == codes::kBinaryFile)
        throw ResourceError(ResourceError::Kind::Invalid, std::string(e.what()), json{{"uri", uri}});
      throw;
    }
    std::uint64_t size = r.contains("size") && r["size"].is_number_unsigned() ? r["size"].get<std::uint64_t>() : 0;
    if (size > kMaxReadBytes)
      throw ResourceError(ResourceError::Kind::TooLarge,
                          uri + " is " + std::to_string(size) + " bytes; resources/read returns files up to " +
                              std::to_string(kMaxReadBytes) + " bytes (the file_read tool pages larger ones)",
                          json{{"uri", uri}, {"size", size}, {"limit", kMaxReadBytes}});
    std::string page = string_field(r, "content");
    std::uint64_t next = r.contains("next_offset") && r["next_offset"].is_number_unsigned()
                             ? r["next_offset"].get<std::uint64_t>() : 0;
    if (mime.empty()) mime = string_field(r, "mime_type");
    content += page;
    bool more = bool_field(r, "truncated", false);
    if (!more) break;
    // A page that does not move on, or a file that grows past the bound while read.
    if (next <= offset || content.size() > 2 * kMaxReadBytes)
      throw ResourceError(ResourceError::Kind::TooLarge, uri + " grew while it was read; read it again",
                          json{{"uri", uri}});
    offset = next;
  }
  json item = {{"uri", uri}, {"mimeType", mime.empty() ? "application/octet-stream" : mime}};
  item[encoding == "utf-8" ? "text" : "blob"] = std::move(content);
  return json{{"contents", json::array({std::move(item)})}};
}

void WorkspaceResources::subscribe(const std::string& conversation, const std::string& uri) {
  auto path = workspace_path_of(uri);
  if (!path)
    throw not_workspace_uri(uri);
  if (!services_.sandboxes)
    throw ResourceError(ResourceError::Kind::Unavailable, "this server was started without sandbox support");
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  if (!watchers_.count(conversation) && watchers_.size() >= kMaxWatchedConversations)
    throw ResourceError(ResourceError::Kind::Invalid,
                        "subscriptions are open in " + std::to_string(kMaxWatchedConversations) +
                            " conversations already; unsubscribe in one first", json{{"uri", uri}});
  auto& watcher = watchers_[conversation];
  if (!watcher) {
    watcher = std::make_shared<Watcher>();
    watcher->conversation = conversation;
  }
  if (!watcher->uris.count(uri) && watcher->uris.size() >= kMaxSubscriptions)
    throw ResourceError(ResourceError::Kind::Invalid,
                        "this conversation already has " + std::to_string(kMaxSubscriptions) +
                            " subscribed resources; unsubscribe some first", json{{"uri", uri}});
  ++watcher->uris[resource_uri(*path)];
  if (!watcher->thread.joinable()) watcher->thread = std::thread([this, watcher] { watch_main(watcher); });
}

void WorkspaceResources::unsubscribe(const std::string& conversation, const std::string& uri) {
  std::shared_ptr<Watcher> ended;
  {
    std::lock_guard lock(mutex_);
    auto path = workspace_path_of(uri);
    auto it = watchers_.find(conversation);
    if (!path || it == watchers_.end()) return;
    auto sub = it->second->uris.find(resource_uri(*path));
    if (sub == it->second->uris.end()) return;
    if (--sub->second == 0) it->second->uris.erase(sub);
    if (!it->second->uris.empty()) return;
    ended = it->second;
    watchers_.erase(it);
    ended_.push_back(ended);  // joined by stop(): its thread may be in a call to the agent
  }
  {
    std::lock_guard lock(ended->mutex);
    ended->stop = true;
  }
  ended->wake.notify_all();
}

void WorkspaceResources::stop() {
  std::map<std::string, std::shared_ptr<Watcher>> all;
  std::vector<std::shared_ptr<Watcher>> ended;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    all.swap(watchers_);
    ended.swap(ended_);
  }
  for (auto& watcher : ended)
    if (watcher->thread.joinable()) watcher->thread.join();
  for (auto& [conversation, watcher] : all) {
    {
      std::lock_guard lock(watcher->mutex);
      watcher->stop = true;
    }
    watcher->wake.notify_all();
  }
  for (auto& [conversation, watcher] : all)
    if (watcher->thread.joinable()) watcher->thread.join();
}

void WorkspaceResources::watch_main(const std::shared_ptr<Watcher>& w) {
  std::shared_ptr<sandbox::AgentClient> agent;
  std::string watch_id;
  bool missed = false;  // something may have changed unseen: report every URI once watching again
  auto subscribed = [&] {
    std::lock_guard lock(mutex_);
    std::set<std::string> out;
    for (const auto& [uri, count] : w->uris) out.insert(uri);
    return out;
  };
  auto report = [&](const std::set<std::string>& uris) {
    for (const auto& uri : uris) {
      try {
        changed_(w->conversation, uri);
      } catch (const std::exception& e) {
        spdlog::warn("resource update for {}: {}", uri, e.what());
      }
    }
  };
  // Waits up to d unless stopped; true when stopped.
  auto pause = [&](milliseconds d) {
    std::unique_lock lock(w->mutex);
    return w->wake.wait_for(lock, d, [&] { return w->stop; });
  };
  while (!pause(milliseconds(0))) {
    if (!agent || !agent->alive()) {
      if (agent) missed = true;  // the sandbox went (idle teardown, restore, a crash)
      agent.reset();
      watch_id.clear();
      try {
        auto* boxes = sandboxes();
        agent = boxes ? boxes->running_agent(w->conversation) : nullptr;
      } catch (const std::exception&) {
        agent.reset();
      }
      if (!agent) {
        missed = true;  // it may start and change files before the watch is up
        if (pause(kIdlePoll)) break;
        continue;
      }
    }
    if (watch_id.empty()) {
      try {
        json r = agent->call(m::kWatchAdd, json{{"path", "/workspace"}, {"recursive", true}}, kAgentTimeout);
        watch_id = string_field(r, "watch_id");
      } catch (const std::exception& e) {
        spdlog::debug("resource watch of {}: {}", w->conversation, e.what());
      }
      if (watch_id.empty()) {
        agent.reset();
        if (pause(kIdlePoll)) break;
        continue;
      }
      if (missed) report(subscribed());
      missed = false;
    }
    // The long poll, interruptible by stop().
    struct Poll {
      std::optional<sandbox::AgentClient::Outcome> outcome;
    };
    auto poll = std::make_shared<Poll>();
    std::uint64_t id = agent->call_async(
        m::kWatchChanges, json{{"watch_id", watch_id}, {"wait_ms", kWaitMs}}, milliseconds(kWaitMs) + kAgentTimeout,
        [w, poll](sandbox::AgentClient::Outcome outcome) {
          {
            std::lock_guard lock(w->mutex);
            poll->outcome = std::move(outcome);
          }
          w->wake.notify_all();
        });
    {
      std::unique_lock lock(w->mutex);
      w->wake.wait(lock, [&] { return w->stop || poll->outcome.has_value(); });
      if (w->stop) {
        lock.unlock();
        agent->cancel(id);
        break;
      }
    }
    auto outcome = std::move(*poll->outcome);
    if (outcome.error) {
      if (outcome.error->code() == std::string(codes::kWatchNotFound)) {
        watch_id.clear();  // replaced by the model's watches, or the agent restarted
        missed = true;
      } else {
        agent.reset();  // the sandbox is going or gone; missed is set when it is seen gone
        missed = true;
      }
      continue;
    }
    const json& r = outcome.result;
    std::set<std::string> wanted = subscribed(), hit;
    if (bool_field(r, "overflowed", false)) {
      hit = wanted;
    } else if (r.contains("events") && r["events"].is_array()) {
      for (const auto& e : r["events"]) {
        for (const char* key : {"path", "from"}) {
          std::string path = string_field(e, key);
          if (path.compare(0, 11, "/workspace/") != 0) continue;
          std::string uri = resource_uri(path);
          if (wanted.count(uri)) hit.insert(uri);
        }
      }
    }
    if (!bool_field(r, "watching", true)) watch_id.clear();
    report(hit);
  }
}

}  // namespace agentbox::tools
