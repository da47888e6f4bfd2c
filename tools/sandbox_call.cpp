#include "tools/sandbox_call.h"

#include "os/thread_cache.h"

#include <spdlog/spdlog.h>

namespace agentbox::tools {

json agent_params(const json& arguments) {
  json params = arguments.is_object() ? arguments : json::object();
  params.erase("conversation");
  return params;
}

ToolResult error_result(const SandboxError& error) {
  // Codes from the box's agent are untrusted: outside the vocabulary, INTERNAL.
  if (!codes::known(error.code())) {
    spdlog::warn("the sandbox reported an unknown error code; shown as INTERNAL");
    return ToolResult::error(codes::kInternal, error.what());
  }
  return ToolResult::error(error.code(), error.what());
}

const json& agent_array(const json& result, const char* key) {
  auto it = result.find(key);
  if (it == result.end() || !it->is_array()) throw std::runtime_error(std::string("\"") + key + "\" is not an array");
  return *it;
}

bool page_of(json& entries, const char* key, const std::string& cursor, std::size_t cap, std::string& next) {
  std::size_t i = 0;
  if (!cursor.empty()) {
    while (i < entries.size() && entries[i].value(key, "") != cursor) ++i;
    if (i == entries.size()) return false;
    ++i;
  }
  json page = json::array();
  for (std::size_t used = 0; i < entries.size(); ++i) {
    std::size_t cost = 2 * entries[i].dump().size();  // a text line and its JSON
    if (!page.empty() && used + cost + 2 * (entries[i].value(key, "").size() + 8) > cap) break;
    used += cost;
    page.push_back(std::move(entries[i]));
  }
  next = i < entries.size() ? page.back().value(key, "") : "";
  entries = std::move(page);
  return true;
}

ToolResult unknown_cursor(const std::string& cursor) {
  return ToolResult::error(codes::kInvalidArguments,
                           "cursor '" + cursor + "' names no entry of this list (gone since?); list again without it");
}

sandbox::Sandboxes* sandboxes_or_reply(const Services& services, const ToolReply& reply) {
  if (!services.sandboxes) {
    reply(ToolResult::error(codes::kSandboxUnavailable, "this server was started without sandbox support"));
    return nullptr;
  }
  try {
    return services.sandboxes();
  } catch (const SandboxError& error) {
    reply(error_result(error));
    return nullptr;
  }
}

void run_blocking(std::function<void()> job) {
  // Not on the dispatcher's pool: these jobs would hold a pool worker for tens
  // of milliseconds or more.
  static os::ThreadCache threads;
  threads.run(std::move(job));
}

namespace {

// A formatter that throws on the agent's result (a number where it reads a
// string, ...) was handed something the agent does not send: the sandbox is
// ended like one that sent a malformed line, and the call gets an error.
ToolResult format_result(const Formatter& format, json result, const std::weak_ptr<sandbox::AgentClient>& client) {
  try {
    return format(std::move(result));
  } catch (const std::exception& e) {
    std::string why = std::string("a result the server could not read (") + e.what() + ")";
    if (auto c = client.lock()) c->reject(why);
    return ToolResult::error(codes::kSandboxFailed,
                             "the sandbox's agent sent " + why +
                                 "; the sandbox was stopped and will be restarted on the next call");
  }
}

// Sends call to the leased sandbox's agent; the reply comes back on the
// client's reader thread, which formats and answers the tool call. With
// try_only nothing blocks: false (and nothing sent) when the agent's pipe is
// busy or full.
bool send_call(std::shared_ptr<sandbox::SandboxLease> lease, const std::shared_ptr<CallContext>& context,
               const ToolReply& reply, AgentCall& call, const Formatter& format, bool try_only) {
  auto client = lease->agent();
  // The lease ends before the answer goes: whoever reads the answer may stop
  // the sandbox next (a teardown refuses one in use). Every copy of the
  // callback shares this one slot, so no copy keeps it alive after.
  auto held = std::make_shared<std::shared_ptr<sandbox::SandboxLease>>(std::move(lease));
  sandbox::AgentClient::NoteSink notes;
  if (call.progress) {
    notes = [context](const std::string& method, const json& params) {
      if (method != "output") return;
      context->progress(params.value("bytes", 0.0), std::nullopt, params.value("data", ""));
    };
  }
  std::weak_ptr<sandbox::AgentClient> weak = client;
  sandbox::AgentClient::Callback done = [held, reply, format, weak](sandbox::AgentClient::Outcome outcome) {
    std::string notice = *held ? (*held)->notice() : "";
    if (outcome.error) {
      held->reset();
      reply(error_result(*outcome.error));
      return;
    }
    ToolResult result = format_result(format, std::move(outcome.result), weak);
    held->reset();
    if (!notice.empty() && !result.is_error) {
      result.structured["notice"] = notice;
      result.text = "Note: " + notice + "\n" + result.text;
    }
    reply(std::move(result));
  };
  std::uint64_t id;
  if (try_only) {
    auto sent = client->try_call_async(call.method, call.params, call.timeout, done, notes);
    if (!sent) return false;
    id = *sent;
  } else {
    id = client->call_async(call.method, std::move(call.params), call.timeout, std::move(done), notes);
  }
  // The agent reads its pipe in order and keeps that order per session.
  context->release_order();
  context->on_cancel([client, id] { client->cancel(id); });
  return true;
}

}  // namespace

void call_agent(const Services& services, std::shared_ptr<CallContext> context, ToolReply reply, AgentCall call,
                Formatter format) {
  sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
  if (!sandboxes) return;
  // The common case, a running sandbox nobody is starting or stopping and a
  // pipe with room, is served from this thread without blocking (it may be
  // the server's stdin reader: Registry::add's run_inline).
  if (std::shared_ptr<sandbox::SandboxLease> lease = sandboxes->try_acquire(context->conversation())) {
    if (send_call(std::move(lease), context, reply, call, format, true)) return;
  }
  // A sandbox may have to start or be restored first, or the pipe is busy.
  run_blocking([sandboxes, context, reply = std::move(reply), call = std::move(call), format = std::move(format)]() mutable {
    std::shared_ptr<sandbox::SandboxLease> lease;
    try {
      // A stopped sandbox is restored first; a long restore reports progress.
      lease = sandboxes->acquire(context->conversation(),
                                 [context](double done, std::optional<double> total, const std::string& message) {
                                   context->progress(done, total, message);
                                 });
    } catch (const SandboxError& e) {
      reply(error_result(e));
      return;
    }
    send_call(std::move(lease), context, reply, call, format, false);
  });
}

AgentTimeout fixed_timeout(std::chrono::milliseconds timeout) {
  return [timeout](const json&) { return timeout; };
}

void bind_agent_tool(Registry& registry, const Services& services, const char* tool, const char* method,
                     AgentTimeout timeout, Formatter format, Registry::RunInline run_inline) {
  registry.add(
      tool,
      [services, method, timeout = std::move(timeout), format = std::move(format)](
          const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
        call_agent(services, context, reply, {method, agent_params(args), timeout(args)}, format);
      },
      std::move(run_inline));
}

}  // namespace agentbox::tools
