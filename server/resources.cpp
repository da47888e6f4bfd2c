#include "server/resources.h"

#include "server/conversation.h"
#include "tools/sandbox_call.h"

#include <spdlog/spdlog.h>

namespace agentbox::server {

namespace {

constexpr const char* kSubscriptionId = "io.modelcontextprotocol/subscriptionId";
constexpr rpc::ErrorCode kResourceNotFound = static_cast<rpc::ErrorCode>(-32002);
constexpr std::size_t kMaxListens = 64;
constexpr std::size_t kMaxListenUris = 1000;

rpc::Error error_of(const tools::ResourceError& e) {
  switch (e.kind()) {
    case tools::ResourceError::Kind::NotFound: return {kResourceNotFound, e.what(), e.data()};
    case tools::ResourceError::Kind::Unavailable: return {rpc::ErrorCode::InternalError, e.what(), e.data()};
    default: return {rpc::ErrorCode::InvalidParams, e.what(), e.data()};
  }
}

// Runs a resource request off the dispatcher's pool (it may restore a
// sandbox) and answers it with what job returns or the error it throws.
void answer_blocking(const std::shared_ptr<Call>& call, std::function<json()> job) {
  tools::run_blocking([call, job = std::move(job)] {
    try {
      call->reply(job());
    } catch (const tools::ResourceError& e) {
      call->reply_error(error_of(e));
    } catch (const ProtocolError& e) {
      call->reply_error(e.error());
    } catch (const SandboxError& e) {
      call->reply_error({rpc::ErrorCode::InternalError, std::string(e.code()) + ": " + e.what(), json{{"code", e.code()}}});
    } catch (const std::exception& e) {
      spdlog::error("{} failed: {}", call->method(), e.what());
      call->reply_error({rpc::ErrorCode::InternalError, std::string(call->method()) + " failed: " + e.what(), nullptr});
    }
  });
}

}  // namespace

ResourceMethods::ResourceMethods(Dispatcher& dispatcher, tools::Services services, std::string default_conversation,
                                 std::function<bool(const std::string&)> known_task)
    : dispatcher_(dispatcher),
      default_conversation_(std::move(default_conversation)),
      known_task_(std::move(known_task)),
      resources_(std::move(services),
                 [this](const std::string& conversation, const std::string& uri) { resource_changed(conversation, uri); }) {
  using Run = Dispatcher::Run;
  using Gate = Dispatcher::Gate;
  dispatcher_.on_request("resources/list", Run::Inline, Gate::Initialized, [this](std::shared_ptr<Call> call) { list(call); });
  dispatcher_.on_request("resources/read", Run::Inline, Gate::Initialized, [this](std::shared_ptr<Call> call) { read(call); });
  dispatcher_.on_request("resources/templates/list", Run::Inline, Gate::Initialized, [](std::shared_ptr<Call> call) {
    ParamReader reader(call->params(), "params");
    if (reader.optional_string("cursor")) reader.fail("cursor", "unknown cursor: there is one page");
    json out = tools::WorkspaceResources::templates();
    if (call->modern()) {
      out["ttlMs"] = 5 * 60 * 1000;
      out["cacheScope"] = "public";
    }
    call->reply(std::move(out));
  });
  dispatcher_.on_request("resources/subscribe", Run::Inline, Gate::Initialized,
                         [this](std::shared_ptr<Call> call) { subscribe(call, true); });
  dispatcher_.on_request("resources/unsubscribe", Run::Inline, Gate::Initialized,
                         [this](std::shared_ptr<Call> call) { subscribe(call, false); });
  dispatcher_.on_request("subscriptions/listen", Run::Inline, Gate::Initialized,
                         [this](std::shared_ptr<Call> call) { listen(call); });
}

ResourceMethods::~ResourceMethods() { stop(); }

void ResourceMethods::stop() { resources_.stop(); }

std::string ResourceMethods::conversation_of(const Call& call) const {
  static const json none = json::object();
  return resolve_conversation(none, call.meta().raw, default_conversation_);
}

void ResourceMethods::list(const std::shared_ptr<Call>& call) {
  ParamReader reader(call->params(), "params");
  std::string cursor = reader.optional_string("cursor").value_or("");
  std::string conversation = conversation_of(*call);
  answer_blocking(call, [this, call, cursor, conversation] {
    json out = resources_.list(conversation, cursor);
    if (call->modern()) {
      out["ttlMs"] = 0;  // files change under it
      out["cacheScope"] = "private";
    }
    return out;
  });
}

void ResourceMethods::read(const std::shared_ptr<Call>& call) {
  ParamReader reader(call->params(), "params");
  std::string uri = reader.required_string("uri");
  std::string conversation = conversation_of(*call);
  call->on_oversized([uri](std::size_t bytes, std::size_t limit) -> json {
    throw ProtocolError(rpc::ErrorCode::InvalidParams,
                        uri + " comes to " + std::to_string(bytes) + " bytes as a message, over the " + std::to_string(limit) +
                            " byte limit; the file_read tool pages it");
  });
  answer_blocking(call, [this, call, uri, conversation] {
    json out = resources_.read(conversation, uri);
    if (call->modern()) {
      out["ttlMs"] = 0;  // a file changes under it: never cached
      out["cacheScope"] = "private";
    }
    return out;
  });
}

void ResourceMethods::subscribe(const std::shared_ptr<Call>& call, bool on) {
  if (call->modern())
    throw ProtocolError(rpc::ErrorCode::MethodNotFound,
                        std::string("resources/") + (on ? "subscribe" : "unsubscribe") +
                            " is not part of 2026-07-28; name the URIs in subscriptions/listen "
                            "(notifications.resourceSubscriptions)");
  ParamReader reader(call->params(), "params");
  std::string uri = reader.required_string("uri");
  if (!tools::workspace_path_of(uri))
    reader.fail("uri", "is not a workspace file URI (resources are file:///workspace/<path>)");
  std::string conversation = conversation_of(*call);
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(conversation, uri);
  try {
    if (on && !subscribed_.count(key)) {
      resources_.subscribe(conversation, uri);
      subscribed_.insert(key);
    } else if (!on && subscribed_.erase(key)) {
      resources_.unsubscribe(conversation, uri);
    }
  } catch (const tools::ResourceError& e) {
    call->reply_error(error_of(e));
    return;
  }
  call->reply(json::object());
}

void ResourceMethods::listen(const std::shared_ptr<Call>& call) {
  if (!call->modern())
    throw ProtocolError(rpc::ErrorCode::MethodNotFound,
                        "subscriptions/listen is a 2026-07-28 method; in this protocol version use resources/subscribe");
  ParamReader reader(call->params(), "params");
  json wanted = reader.optional_object("notifications");
  if (!reader.has("notifications")) reader.fail("notifications", "is required (an object naming what to listen for)");
  Listen l;
  l.call = call;
  l.id = call->id();
  l.conversation = conversation_of(*call);
  json honoured = json::object();
  // The tool list never changes while the server runs: nothing will be sent, truthfully.
  if (wanted.value("toolsListChanged", false)) honoured["toolsListChanged"] = true;
  if (wanted.contains("resourceSubscriptions")) {
    const json& uris = wanted["resourceSubscriptions"];
    if (!uris.is_array()) reader.fail("notifications", "resourceSubscriptions must be an array of URIs");
    if (uris.size() > kMaxListenUris)
      reader.fail("notifications", "resourceSubscriptions names more than " + std::to_string(kMaxListenUris) + " URIs");
    for (const auto& uri : uris) {
      if (!uri.is_string() || !tools::workspace_path_of(uri.get<std::string>()))
        reader.fail("notifications", "resourceSubscriptions holds " + uri.dump() +
                                         ", not a workspace file URI (file:///workspace/<path>)");
      l.uris.insert(uri.get<std::string>());
    }
    honoured["resourceSubscriptions"] = json(l.uris);
  }
  if (wanted.contains("taskIds")) {
    if (!declares_tasks_extension(call->meta())) throw missing_tasks_extension("listening for task notifications");
    if (!wanted["taskIds"].is_array()) reader.fail("notifications", "taskIds must be an array of task ids");
    for (const auto& id : wanted["taskIds"])
      if (id.is_string() && known_task_ && known_task_(id.get<std::string>())) l.task_ids.insert(id.get<std::string>());
    honoured["taskIds"] = json(l.task_ids);
  }
  std::string key = call->id().dump();
  {
    std::lock_guard lock(mutex_);
    if (listens_.size() >= kMaxListens)
      throw ProtocolError(rpc::ErrorCode::InvalidParams, "already " + std::to_string(kMaxListens) +
                                                             " subscriptions/listen streams open; cancel one first");
    std::set<std::string> done;
    try {
      for (const auto& uri : l.uris) {
        resources_.subscribe(l.conversation, uri);
        done.insert(uri);
      }
    } catch (const tools::ResourceError& e) {
      for (const auto& uri : done) resources_.unsubscribe(l.conversation, uri);
      call->reply_error(error_of(e));
      return;
    }
    // The acknowledgement goes before anything the stream carries.
    dispatcher_.notify("notifications/subscriptions/acknowledged",
                       json{{"notifications", honoured}, {"_meta", {{kSubscriptionId, l.id}}}});
    listens_.emplace(key, std::move(l));
  }
  // The stream stays open until the client cancels it (notifications/cancelled).
  call->on_cancel([this, key] { end_listen(key); });
}

void ResourceMethods::end_listen(const std::string& key) {
  std::shared_ptr<Call> call;  // released outside the lock
  std::lock_guard lock(mutex_);
  auto it = listens_.find(key);
  if (it == listens_.end()) return;
  for (const auto& uri : it->second.uris) resources_.unsubscribe(it->second.conversation, uri);
  call = std::move(it->second.call);
  listens_.erase(it);
}

void ResourceMethods::resource_changed(const std::string& conversation, const std::string& uri) {
  std::vector<json> ids;
  bool legacy = false;
  {
    std::lock_guard lock(mutex_);
    legacy = subscribed_.count({conversation, uri}) > 0;
    for (const auto& [key, l] : listens_)
      if (l.conversation == conversation && l.uris.count(uri)) ids.push_back(l.id);
  }
  if (legacy) dispatcher_.notify("notifications/resources/updated", json{{"uri", uri}});
  for (const auto& id : ids)
    dispatcher_.notify("notifications/resources/updated", json{{"uri", uri}, {"_meta", {{kSubscriptionId, id}}}});
}

void ResourceMethods::task_changed(const std::string& task_id, const json& detailed_task) {
  std::vector<json> ids;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, l] : listens_)
      if (l.task_ids.count(task_id)) ids.push_back(l.id);
  }
  for (const auto& id : ids) {
    json params = detailed_task;
    params["_meta"] = {{kSubscriptionId, id}};
    dispatcher_.notify("notifications/tasks", params);
  }
}

}  // namespace agentbox::server
