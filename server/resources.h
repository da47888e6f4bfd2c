// MCP resources and subscriptions (docs/protocol.md, "Resources"): the
// conversation's workspace files as file:///workspace/<path> through
// resources/list, resources/read and resources/templates/list; changes
// through resources/subscribe (the 2025 eras: notifications/resources/updated
// to the host) or through a subscriptions/listen stream (2026-07-28: the
// same notification carrying the stream's subscriptionId), which also
// carries notifications/tasks for the task ids it names (the 2026 tasks
// extension). The files themselves are the tools layer's
// (tools/resources.h); this is the protocol around them.
#pragma once

#include "server/dispatcher.h"
#include "tools/resources.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace agentbox::server {

class ResourceMethods {
 public:
  // known_task: whether a 2026 task of that id exists (a listen names only those).
  ResourceMethods(Dispatcher& dispatcher, tools::Services services, std::string default_conversation,
                  std::function<bool(const std::string& task_id)> known_task);
  ~ResourceMethods();
  ResourceMethods(const ResourceMethods&) = delete;
  ResourceMethods& operator=(const ResourceMethods&) = delete;

  // Ends the file watchers (server shutdown, after the dispatcher's).
  void stop();
  // A 2026 task changed: notifications/tasks to the streams that listen for it.
  void task_changed(const std::string& task_id, const json& detailed_task);

 private:
  struct Listen {
    std::shared_ptr<Call> call;  // kept open: answered only if the server ends the stream
    json id;  // the listen request's id: the subscriptionId of what it carries
    std::string conversation;
    std::set<std::string> uris;
    std::set<std::string> task_ids;
  };
  void list(const std::shared_ptr<Call>& call);
  void read(const std::shared_ptr<Call>& call);
  void subscribe(const std::shared_ptr<Call>& call, bool on);
  void listen(const std::shared_ptr<Call>& call);
  void end_listen(const std::string& key);
  void resource_changed(const std::string& conversation, const std::string& uri);
  std::string conversation_of(const Call& call) const;

  Dispatcher& dispatcher_;
  std::string default_conversation_;
  std::function<bool(const std::string&)> known_task_;
  tools::WorkspaceResources resources_;
  std::mutex mutex_;
  std::set<std::pair<std::string, std::string>> subscribed_;  // resources/subscribe: {conversation, uri}
  std::map<std::string, Listen> listens_;                      // by the listen's serialized id
};

}  // namespace agentbox::server
