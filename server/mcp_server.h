// The MCP methods: lifecycle (initialize, ping, server/discover), tools/list,
// tools/call and logging. One line per method in the route table; the
// dispatcher handles everything they have in common.
#pragma once

#include "server/dispatcher.h"
#include "tools/registry.h"

#include <string>

namespace agentbox::server {

struct McpOptions {
  std::string default_conversation = "default";
  std::string server_version;
};

class McpServer {
 public:
  McpServer(Dispatcher& dispatcher, const tools::Registry& registry, McpOptions options);
  // Detaches the log forwarder, which points back at this server.
  ~McpServer();
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;

 private:
  void initialize(const std::shared_ptr<Call>& call);
  void discover(const std::shared_ptr<Call>& call);
  void list_tools(const std::shared_ptr<Call>& call);
  void call_tool(const std::shared_ptr<Call>& call);
  void set_level(const std::shared_ptr<Call>& call);

  json capabilities() const;
  json server_info() const;

  Dispatcher& dispatcher_;
  const tools::Registry& registry_;
  McpOptions options_;
};

}  // namespace agentbox::server
