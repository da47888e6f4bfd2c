#include "server/mcp_server.h"

#include "server/conversation.h"
#include "server/logging.h"
#include "contract/errors.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

namespace agentbox::server {

namespace {

constexpr const char* kInstructions =
    "agentbox gives this conversation its own sandboxed Linux machine. Use exec to run commands, the file_* "
    "tools to read and change files under /workspace, sessions for separate shells, and process_* for "
    "long-running programs (exec with yield_ms hands a command that may outlast your tool timeout over to "
    "them), terminal_* for programs that want a terminal (REPLs, vim, installers), file_watch and "
    "file_changes to notice changes. The workspace survives idle periods and restarts.";

// Lists do not change while the server runs; hosts may cache them this long.
constexpr int kListTtlMs = 5 * 60 * 1000;

// Adapts a dispatcher Call to what tools may see of it.
class ToolCallContext : public tools::CallContext {
 public:
  ToolCallContext(std::shared_ptr<Call> call, std::string conversation)
      : call_(std::move(call)), conversation_(std::move(conversation)) {}
  const std::string& conversation() const override { return conversation_; }
  void progress(double done, std::optional<double> total, const std::string& message) override {
    call_->progress(done, total, message);
  }
  bool cancelled() const override { return call_->cancelled(); }
  void on_cancel(std::function<void()> fn) override { call_->on_cancel(std::move(fn)); }
  void release_order() override { call_->release_order(); }

 private:
  std::shared_ptr<Call> call_;
  std::string conversation_;
};

// "arguments.bogus is not a known argument (file_read takes path, encoding, ...)":
// an argument error says what to send instead.
std::string argument_message(const json& definition, const tools::ValidationError& invalid) {
  std::string message = invalid.field + " " + invalid.message;
  if (invalid.message == "is not a known argument") {
    std::string known;
    const json properties = definition["inputSchema"].value("properties", json::object());
    for (const auto& [name, schema] : properties.items()) known += (known.empty() ? "" : ", ") + name;
    message += " (" + definition.value("name", "") + " takes " + known + ")";
  }
  return message;
}

// A known tool named with `arguments` that is not an object: an argument error
// like any other, not -32602.
const tools::Registry::Entry* tool_with_bad_arguments(const tools::Registry& registry, const json& params) {
  if (!params.is_object()) return nullptr;
  auto arguments = params.find("arguments");
  auto name = params.find("name");
  if (arguments == params.end() || arguments->is_object() || arguments->is_null()) return nullptr;
  if (name == params.end() || !name->is_string()) return nullptr;
  return registry.find(name->get_ref<const std::string&>());
}

}  // namespace

// Moves the result in: structuredContent may hold a megabyte page. An error
// has no structuredContent (the SDK would check it against the outputSchema
// and throw -32602 in the host); its object goes in _meta (docs/protocol.md,
// "Error results").
json call_tool_result(tools::ToolResult result) {
  json out = json::object();
  out["content"] = json::array({json{{"type", "text"}, {"text", std::move(result.text)}}});
  if (result.extra_content.is_array())
    for (auto& block : result.extra_content) out["content"].push_back(std::move(block));
  if (result.is_error)
    out["_meta"] = json{{"agentbox/error", std::move(result.error_object)}};
  else
    out["structuredContent"] = std::move(result.structured);
  out["isError"] = result.is_error;
  return out;
}

McpServer::McpServer(Dispatcher& dispatcher, const tools::Registry& registry, McpOptions options)
    : dispatcher_(dispatcher),
      registry_(registry),
      options_(std::move(options)),
      tasks_([this](const std::string& id, const json& task, bool modern) {
        if (!modern) dispatcher_.notify("notifications/tasks/status", task);
        else if (resources_) resources_->task_changed(id, task);
      }) {
  using Run = Dispatcher::Run;
  using Gate = Dispatcher::Gate;
  auto bind = [this](void (McpServer::*method)(const std::shared_ptr<Call>&)) {
    return [this, method](std::shared_ptr<Call> call) { (this->*method)(call); };
  };
  dispatcher_.on_request("initialize", Run::Inline, Gate::Open, bind(&McpServer::initialize));
  dispatcher_.on_request("server/discover", Run::Inline, Gate::Open, bind(&McpServer::discover));
  dispatcher_.on_request("ping", Run::Inline, Gate::Open, [](std::shared_ptr<Call> call) { call->reply(json::object()); });
  dispatcher_.on_request("logging/setLevel", Run::Inline, Gate::Initialized, bind(&McpServer::set_level));
  dispatcher_.on_request("tools/list", Run::Pooled, Gate::Initialized, bind(&McpServer::list_tools));
  dispatcher_.on_request("tools/call", Run::Pooled, Gate::Initialized, bind(&McpServer::call_tool),
                         [this](const json& params) {
                           // Malformed calls go to the pool, where call_tool explains them.
                           if (!params.is_object()) return false;
                           auto name = params.find("name");
                           auto arguments = params.find("arguments");
                           return name != params.end() && name->is_string() && arguments != params.end() &&
                                  arguments->is_object() &&
                                  registry_.runs_inline(name->get_ref<const std::string&>(), *arguments);
                         },
                         [this](const json& params) -> std::optional<std::string> {
                           // Calls of tools that run in a session keep arrival order per conversation.
                           auto name = params.is_object() ? params.find("name") : params.end();
                           if (name == params.end() || !name->is_string() ||
                               !registry_.keeps_session_order(name->get_ref<const std::string&>()))
                             return std::nullopt;
                           static const json none = json::object();
                           auto arguments = params.find("arguments");
                           auto meta = params.find("_meta");
                           return resolve_conversation(arguments != params.end() ? *arguments : none,
                                                       meta != params.end() ? *meta : none,
                                                       options_.default_conversation);
                         });
  // Tasks (server/tasks.h): quick, so on the reader thread; tasks/result
  // that must wait is answered later by the task's end. A 2026 request is
  // served by the extension's methods (get with the result inline, update,
  // cancel acknowledged; no result or list).
  dispatcher_.on_request("tasks/get", Run::Inline, Gate::Initialized, [this](std::shared_ptr<Call> call) {
    if (!call->modern()) return call->reply(tasks_.get(call->params()));
    require_task_extension(*call);
    call->reply(tasks_.get_detailed(call->params()));
  });
  dispatcher_.on_request("tasks/update", Run::Inline, Gate::Initialized, [this](std::shared_ptr<Call> call) {
    if (!call->modern())
      throw ProtocolError(rpc::ErrorCode::MethodNotFound, "tasks/update belongs to the 2026 tasks extension");
    require_task_extension(*call);
    call->reply(tasks_.update(call->params()));
  });
  dispatcher_.on_request("tasks/cancel", Run::Inline, Gate::Initialized, [this](std::shared_ptr<Call> call) {
    if (!call->modern()) return call->reply(tasks_.cancel(call->params()));
    require_task_extension(*call);
    call->reply(tasks_.cancel_acknowledged(call->params()));
  });
  for (const char* method : {"tasks/result", "tasks/list"}) {
    dispatcher_.on_request(method, Run::Inline, Gate::Initialized, [this, method](std::shared_ptr<Call> call) {
      if (call->modern())
        throw ProtocolError(rpc::ErrorCode::MethodNotFound,
                            std::string(method) + " is not part of the 2026 tasks extension (tasks/get carries the result)");
      if (std::string(method) == "tasks/result") tasks_.result(call);
      else call->reply(tasks_.list(call->params()));
    });
  }
  resources_ = std::make_unique<ResourceMethods>(dispatcher_, options_.services, options_.default_conversation,
                                                 [this](const std::string& id) { return tasks_.known_modern(id); });
  dispatcher_.on_notification("notifications/initialized", [](const json&) { spdlog::debug("client initialized"); });

  forward_logs_to_client([this](spdlog::level::level_enum level, const std::string& logger, const std::string& text) {
    dispatcher_.notify("notifications/message",
                       json{{"level", log_level_name(level)}, {"logger", logger}, {"data", text}});
  });
}

McpServer::~McpServer() {
  forward_logs_to_client(nullptr);
  stop();
}

void McpServer::stop() {
  if (resources_) resources_->stop();
}

void McpServer::require_task_extension(const Call& call) {
  if (!declares_tasks_extension(call.meta())) throw missing_tasks_extension(call.method());
}

json McpServer::capabilities(bool with_tasks, bool modern) const {
  json c = {{"tools", json{{"listChanged", false}}},
            {"logging", json::object()},
            {"resources", json{{"subscribe", true}, {"listChanged", false}}}};
  if (with_tasks)
    c["tasks"] = {{"list", json::object()}, {"cancel", json::object()},
                  {"requests", {{"tools", {{"call", json::object()}}}}}};
  if (modern) c["extensions"] = {{"io.modelcontextprotocol/tasks", json::object()}};
  return c;
}

json McpServer::server_info() const {
  return json{{"name", "agentbox"}, {"title", "agentbox sandboxes"}, {"version", options_.server_version}};
}

void McpServer::initialize(const std::shared_ptr<Call>& call) {
  // A second initialize is a new client on the same server: a bridge that
  // keeps one server for every client in turn (supergateway's SSE mode)
  // sends one per connection. It is answered like the first; sandboxes and
  // their terminals and processes carry on (docs/protocol.md).
  if (dispatcher_.initialized()) spdlog::info("initialize again: a new client on this server");
  InitializeParams params = parse_initialize_params(call->params());
  // Unknown versions get our latest; the client decides whether it can go on.
  std::string version = is_supported_initialize_version(params.protocol_version)
                            ? params.protocol_version
                            : std::string(kInitializeVersions.front());
  spdlog::info("initialize from {} {} asking {}, speaking {}", params.client_info.name, params.client_info.version,
               params.protocol_version, version);
  // Tasks came with 2025-11-25 (the 2026 era has the extension instead).
  bool with_tasks = version == "2025-11-25";
  tasks_declared_ = with_tasks;
  call->reply(json{{"protocolVersion", version},
                   {"capabilities", capabilities(with_tasks, false)},
                   {"serverInfo", server_info()},
                   {"instructions", kInstructions}});
  dispatcher_.set_initialized();
}

void McpServer::discover(const std::shared_ptr<Call>& call) {
  call->reply(json{{"supportedVersions", supported_versions_json()},
                   {"capabilities", capabilities(false, true)},
                   {"serverInfo", server_info()},
                   {"instructions", kInstructions},
                   {"ttlMs", kListTtlMs},
                   {"cacheScope", "public"},
                   {"_meta", json{{std::string(kMetaServerInfo), server_info()}}}});
}

void McpServer::set_level(const std::shared_ptr<Call>& call) {
  ParamReader reader(call->params(), "params");
  std::string name = reader.required_string("level");
  auto level = parse_log_level(name);
  if (!level)
    reader.fail("level", "unknown level \"" + name +
                             "\" (use debug, info, notice, warning, error, critical, alert or emergency)");
  set_client_log_level(static_cast<spdlog::level::level_enum>(*level));
  call->reply(json::object());
}

void McpServer::list_tools(const std::shared_ptr<Call>& call) {
  ParamReader reader(call->params(), "params");
  if (auto cursor = reader.optional_string("cursor"))
    reader.fail("cursor", "unknown cursor: tools/list returns every tool in one page");
  json result = {{"tools", registry_.definitions()}};
  if (call->modern()) {
    result["ttlMs"] = kListTtlMs;
    result["cacheScope"] = "public";
  }
  call->reply(std::move(result));
}

void McpServer::call_tool(const std::shared_ptr<Call>& call) {
  auto answer = [call](tools::ToolResult result) { call->reply(call_tool_result(std::move(result))); };
  // Whatever a result holds, it is answered as a result: one over the
  // message limit becomes an INTERNAL error result, not -32603.
  call->on_oversized([](std::size_t bytes, std::size_t limit) {
    return call_tool_result(tools::ToolResult::error(
        codes::kInternal, "the result (" + std::to_string(bytes) + " bytes) is larger than the " +
                                       std::to_string(limit) + " byte message limit; ask for less at a time"));
  });
  if (tool_with_bad_arguments(registry_, call->params())) {
    answer(tools::ToolResult::error(codes::kInvalidArguments, "arguments must be an object",
                                    json{{"field", "arguments"}}));
    return;
  }
  CallToolParams params = parse_call_tool_params(call->params());
  const auto* tool = registry_.find(params.name);
  if (!tool)
    throw ProtocolError(rpc::ErrorCode::InvalidParams, "unknown tool: " + params.name,
                        json{{"field", "params.name"}, {"name", params.name}});
  // Argument errors are error results in every protocol era: a model can
  // correct one, while Codex shows a -32602 as a backtrace.
  if (auto invalid = registry_.validate(*tool, params.arguments)) {
    answer(tools::ToolResult::error(codes::kInvalidArguments,
                                    argument_message(registry_.definition(*tool), *invalid),
                                    json{{"field", invalid->field}}));
    return;
  }
  std::string conversation = resolve_conversation(params.arguments, call->meta().raw, options_.default_conversation);
  const json& raw = call->params();
  if (tasks_declared_ && !call->modern() && raw.contains("task") && raw["task"].is_object()) {
    call_tool_as_task(call, *tool, params.name, params.arguments, conversation);
    return;
  }
  if (call->modern() && declares_tasks_extension(call->meta()) && may_run_as_task(*tool)) {
    call_tool_deferred(call, *tool, params.name, params.arguments, conversation);
    return;
  }
  auto context = std::make_shared<ToolCallContext>(call, conversation);
  tools::ToolReply reply(params.name, answer);
  try {
    registry_.function(*tool)(params.arguments, context, reply);
  } catch (const std::exception& e) {
    // A tool that throws is a server bug; the model still gets a result.
    spdlog::error("tool {} failed: {}", params.name, e.what());
    reply(tools::ToolResult::error(codes::kInternal, std::string("the tool failed: ") + e.what()));
  }
}

}  // namespace agentbox::server
