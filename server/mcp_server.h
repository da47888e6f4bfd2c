// The MCP methods: lifecycle (initialize, ping, server/discover), tools/list,
// tools/call and logging. One line per method in the route table; the
// dispatcher handles everything they have in common.
#pragma once

#include "server/dispatcher.h"
#include "server/resources.h"
#include "server/tasks.h"
#include "tools/register.h"
#include "tools/registry.h"

#include <atomic>
#include <memory>
#include <string>

namespace agentbox::server {

struct McpOptions {
  std::string default_conversation = "default";
  std::string server_version;
  // What resources/* reach (the workspace files); empty: no sandboxes.
  tools::Services services;
};

// A tool's result as a CallToolResult (error results carry their object in _meta).
json call_tool_result(tools::ToolResult result);

class McpServer {
 public:
  McpServer(Dispatcher& dispatcher, const tools::Registry& registry, McpOptions options);
  // Detaches the log forwarder, which points back at this server.
  ~McpServer();
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;
  // Ends what runs on its own (the resource watchers): after the
  // dispatcher's shutdown, before the sandboxes stop.
  void stop();

 private:
  void initialize(const std::shared_ptr<Call>& call);
  void discover(const std::shared_ptr<Call>& call);
  void list_tools(const std::shared_ptr<Call>& call);
  void call_tool(const std::shared_ptr<Call>& call);
  void set_level(const std::shared_ptr<Call>& call);
  // A tools/call that carries `task` (2025-11-25 tasks): answered with a
  // CreateTaskResult, the tool's result kept in tasks_.
  void call_tool_as_task(const std::shared_ptr<Call>& call, const tools::Registry::Entry& tool, const std::string& name,
                         const json& arguments, const std::string& conversation);
  // A 2026 call from a client that declares the tasks extension
  // (task_calls.cpp): answered plainly if it ends soon, else as a task.
  void call_tool_deferred(const std::shared_ptr<Call>& call, const tools::Registry::Entry& tool, const std::string& name,
                          const json& arguments, const std::string& conversation);
  bool may_run_as_task(const tools::Registry::Entry& tool) const;
  // tasks/* of the 2026 extension: the request must declare it (-32021).
  static void require_task_extension(const Call& call);

  json capabilities(bool with_tasks, bool modern) const;
  json server_info() const;

  Dispatcher& dispatcher_;
  const tools::Registry& registry_;
  McpOptions options_;
  TaskStore tasks_;
  std::unique_ptr<ResourceMethods> resources_;
  // Tasks are declared to (and taken from) a client that negotiated 2025-11-25.
  std::atomic<bool> tasks_declared_{false};
};

}  // namespace agentbox::server
