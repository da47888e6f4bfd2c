// Workspace files as MCP resources (docs/design.md section 11, "Resources"):
// file:///workspace/<path> names a file of the conversation's /workspace.
// list pages the workspace's files, read returns one whole (up to
// kMaxReadBytes; larger files are for file_read's pages), and a subscribed
// file's changes are reported through `changed`.
//
// A subscription watches without keeping its sandbox up: while the sandbox
// runs, one recursive file watch on /workspace (agent/watches.h) is long-polled
// through the agent without a lease (Sandboxes::running_agent), so idle
// teardown goes ahead as if nobody watched. When the sandbox comes back (a
// tool call restored it) or its watch was lost, every subscribed file is
// reported changed: what happened meanwhile was not seen.
#pragma once

#include "tools/register.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace agentbox::tools {

using json = nlohmann::json;

// Why a resource request failed; the server turns it into a JSON-RPC error.
class ResourceError : public std::runtime_error {
 public:
  enum class Kind { NotFound, Invalid, TooLarge, Unavailable };
  ResourceError(Kind kind, std::string message, json data = nullptr)
      : std::runtime_error(std::move(message)), kind_(kind), data_(std::move(data)) {}
  Kind kind() const { return kind_; }
  const json& data() const { return data_; }

 private:
  Kind kind_;
  json data_;
};

// "/workspace/a b.txt" for "file:///workspace/a%20b.txt"; nullopt for a URI
// that names nothing under /workspace (another scheme, a host, "..", a NUL).
std::optional<std::string> workspace_path_of(const std::string& uri);
// The URI of a path under /workspace, percent-encoded.
std::string resource_uri(const std::string& path);

class WorkspaceResources {
 public:
  static constexpr std::uint64_t kMaxReadBytes = 1 << 20;
  static constexpr std::size_t kMaxSubscriptions = 1000;  // per conversation
  static constexpr std::size_t kMaxWatchedConversations = 64;  // each has a thread
  using Changed = std::function<void(const std::string& conversation, const std::string& uri)>;

  WorkspaceResources(Services services, Changed changed);
  ~WorkspaceResources();  // stop()
  WorkspaceResources(const WorkspaceResources&) = delete;
  WorkspaceResources& operator=(const WorkspaceResources&) = delete;

  // {resources[] {uri, name, size}, nextCursor?}: the files (hidden ones
  // left out) of a conversation that has a sandbox, restored if it was torn
  // down; none for a conversation that never had one (none is started).
  // Throws ResourceError, or SandboxError when the sandbox cannot start.
  json list(const std::string& conversation, const std::string& cursor);
  // {contents[] {uri, mimeType, text | blob}}. Throws as list.
  json read(const std::string& conversation, const std::string& uri);
  // {resourceTemplates[]}: the one template, file:///workspace/{+path}.
  static json templates();

  // Counted: a URI stays watched until unsubscribed as often as subscribed.
  // Throws ResourceError (Invalid: not a workspace URI, or over the bound).
  void subscribe(const std::string& conversation, const std::string& uri);
  void unsubscribe(const std::string& conversation, const std::string& uri);
  // Ends every watcher (server shutdown); returns at once.
  void stop();

 private:
  struct Watcher;
  void watch_main(const std::shared_ptr<Watcher>& watcher);
  sandbox::Sandboxes* sandboxes() const;

  Services services_;
  Changed changed_;
  std::mutex mutex_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Watcher>> watchers_;  // by conversation
  std::vector<std::shared_ptr<Watcher>> ended_;  // unsubscribed, their threads ending
};

}  // namespace agentbox::tools
