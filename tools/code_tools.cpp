// Code contexts: code_run, code_context_create, code_context_list,
// code_context_delete (docs/design.md section 12; the interpreters run in
// the box, agent/code_contexts.h). The host keeps each context and its
// successful cells in the catalog under the conversation's sandbox id, so
// when the box no longer has a context (an idle teardown, a restart, an
// interpreter killed after an interrupt) code_run starts it again and
// replays those cells before the new one. The agent's reply is untrusted:
// every field is type-checked here, images are checked as base64 and bounded.
#include "tools/sandbox_call.h"

#include "os/utf8.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <future>
#include <random>

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;
constexpr milliseconds kSlack{30'000};
constexpr std::size_t kMaxImages = 8;
constexpr std::size_t kMaxImageBytes = 4 << 20;  // base64, a cell's images together (the agent's bound)

// One agent call from a blocking thread, cancelled with the tool call.
struct AgentCalls {
  std::shared_ptr<sandbox::AgentClient> client;
  std::shared_ptr<CallContext> context;
  std::shared_ptr<std::atomic<std::uint64_t>> current = std::make_shared<std::atomic<std::uint64_t>>(0);

  AgentCalls(std::shared_ptr<sandbox::AgentClient> c, std::shared_ptr<CallContext> ctx)
      : client(std::move(c)), context(std::move(ctx)) {
    context->on_cancel([client = client, current = current] {
      if (auto id = current->load()) client->cancel(id);
    });
  }

  sandbox::AgentClient::Outcome call(const char* method, json params, milliseconds timeout) {
    auto done = std::make_shared<std::promise<sandbox::AgentClient::Outcome>>();
    auto outcome = done->get_future();
    current->store(client->call_async(method, std::move(params), timeout,
                                      [done](sandbox::AgentClient::Outcome o) { done->set_value(std::move(o)); }));
    context->release_order();
    if (context->cancelled()) client->cancel(current->load());
    auto o = outcome.get();
    current->store(0);
    return o;
  }
};

const std::string& string_at(const json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_string()) throw std::runtime_error(std::string("\"") + key + "\" is not a string");
  return it->get_ref<const std::string&>();
}

bool bool_at(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_boolean() && it->get<bool>();
}

std::int64_t count_at(const json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end()) return 0;
  if (!it->is_number_unsigned()) throw std::runtime_error(std::string("\"") + key + "\" is not a count");
  return static_cast<std::int64_t>(std::min<std::uint64_t>(it->get<std::uint64_t>(), 1ull << 40));
}

bool base64(const std::string& s) {
  if (s.empty() || s.size() % 4) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '+' || ch == '/' || ch == '=')) return false;
  return true;
}

// The agent cuts a cell's output to the inline cap; a box that sends more
// is cut here too (the front kept), so no result grows past the cap.
std::string within(const std::string& text, std::size_t cap, bool& cut) {
  if (text.size() <= cap) return text;
  cut = true;
  return std::string(os::utf8_prefix(text, cap));
}

// A cell's error; a traceback past the inline cap keeps its end, where
// the exception is.
json error_of(const json& r, std::size_t cap = contract::kInlineOutputChars) {
  auto it = r.find("error");
  if (it == r.end() || it->is_null()) return nullptr;
  if (!it->is_object()) throw std::runtime_error("\"error\" is not an object");
  bool cut = false;
  return {{"name", within(string_at(*it, "name"), 256, cut)},
          {"value", within(string_at(*it, "value"), cap / 2, cut)},
          {"traceback", std::string(os::utf8_suffix(string_at(*it, "traceback"), cap / 2))}};
}

// The tool result from the agent's code.run result.
ToolResult cell_result(const json& r, const std::string& language, bool restarted, bool kept, std::size_t cap) {
  if (!r.is_object()) throw std::runtime_error("the result is not an object");
  bool cut = false;
  json out = {{"context", string_at(r, "context")}, {"language", language}, {"stdout", within(string_at(r, "stdout"), cap, cut)},
              {"stderr", within(string_at(r, "stderr"), cap, cut)}};
  auto res = r.find("result");
  out["result"] = res != r.end() && res->is_string() ? json(within(res->get<std::string>(), cap, cut)) : json(nullptr);
  json error = error_of(r);
  out["error"] = error;
  out["interrupted"] = bool_at(r, "interrupted");
  out["restarted"] = restarted;
  out["replayed"] = count_at(r, "replayed");
  if (auto failed = count_at(r, "replay_failed")) out["replay_failed"] = failed;
  out["duration_ms"] = count_at(r, "duration_ms");
  out["truncated"] = bool_at(r, "truncated") || cut;
  out["kept"] = kept;
  json images = json::array(), blocks = json::array();
  std::size_t bytes = 0;
  for (const auto& image : agent_array(r, "images")) {
    if (!image.is_string() || !base64(image.get_ref<const std::string&>()))
      throw std::runtime_error("an image is not base64 text");
    bytes += image.get_ref<const std::string&>().size();
    if (images.size() >= kMaxImages || bytes > kMaxImageBytes) {
      out["truncated"] = true;
      break;
    }
    images.push_back({{"mime_type", "image/png"}, {"data", image}});
    blocks.push_back({{"type", "image"}, {"data", image}, {"mimeType", "image/png"}});
  }
  out["images"] = images;

  std::string text = out["stdout"].get<std::string>();
  const std::string& err = out["stderr"].get_ref<const std::string&>();
  if (!err.empty()) {
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += "[stderr]\n" + err;
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (out["result"].is_string()) text += "Out: " + out["result"].get<std::string>() + "\n";
  if (error.is_object()) {
    const std::string& tb = error["traceback"].get_ref<const std::string&>();
    text += tb.empty() ? error["name"].get<std::string>() + ": " + error["value"].get<std::string>() + "\n" : tb;
    if (!tb.empty() && tb.back() != '\n') text += '\n';
    if (out["interrupted"].get<bool>()) text += error["value"].get<std::string>() + "\n";
  }
  text += "[" + language + " context " + json(out["context"]).dump() + ": " + (error.is_null() ? "ok" : "error") + ", " +
          std::to_string(out["duration_ms"].get<std::int64_t>()) + " ms";
  if (!images.empty()) text += ", " + std::to_string(images.size()) + " figure(s) as PNG images below";
  if (out["truncated"].get<bool>()) text += ", output cut";
  if (restarted)
    text += "; the interpreter was started again and " + std::to_string(out["replayed"].get<std::int64_t>()) +
            " earlier successful cell(s) replayed (their output not shown)";
  if (error.is_null() && !kept) text += "; this cell was not kept for replay (the context holds the most it may)";
  text += "]";
  ToolResult result = ToolResult::ok(std::move(out), std::move(text));
  result.extra_content = std::move(blocks);
  return result;
}

std::string new_context_id() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mutex);
  char id[24];
  std::snprintf(id, sizeof id, "ctx-%08llx", static_cast<unsigned long long>(random() & 0xffffffffull));
  return id;
}

std::optional<persistence::CodeContextRecord> find_context(sandbox::Sandboxes& sandboxes, const std::string& conversation,
                                                           const std::string& id) {
  for (auto& c : sandboxes.code_contexts(conversation))
    if (c.id == id) return c;
  return std::nullopt;
}

ToolResult no_context(const std::string& id) {
  return ToolResult::error(codes::kContextNotFound, "no code context '" + id +
                                                         "' in this conversation (code_context_list shows them, "
                                                         "code_context_create makes one)");
}

// Reads a formatter's input as call_agent does: what it cannot read ends the sandbox.
ToolResult read_reply(sandbox::AgentClient& client, const std::function<ToolResult()>& format) {
  try {
    return format();
  } catch (const std::exception& e) {
    std::string why = std::string("a result the server could not read (") + e.what() + ")";
    client.reject(why);
    return ToolResult::error(codes::kSandboxFailed, "the sandbox's agent sent " + why +
                                                        "; the sandbox was stopped and will be restarted on the next call");
  }
}

void with_notice(ToolResult& result, const std::string& notice) {
  if (notice.empty() || result.is_error) return;
  result.structured["notice"] = notice;
  result.text = "Note: " + notice + "\n" + result.text;
}

void run_code(sandbox::Sandboxes& sandboxes, const json& args, const std::shared_ptr<CallContext>& context,
              const ToolReply& reply) {
  const std::string& conversation = context->conversation();
  auto lease = sandboxes.acquire(conversation, [context](double done, std::optional<double> total, const std::string& m) {
    context->progress(done, total, m);
  });
  std::string id = args.value("context", "");
  std::string language = args.value("language", "");
  if (!id.empty()) {
    auto known = find_context(sandboxes, conversation, id);
    if (!known) return reply(no_context(id));
    if (!language.empty() && language != known->language)
      return reply(ToolResult::error(codes::kInvalidArguments, "context '" + id + "' is a " + known->language +
                                                                   " context, not " + language + " (leave language out)"));
    language = known->language;
  } else {
    if (language.empty()) language = "python";
    id = language;  // the language's default context
    if (!sandboxes.add_code_context(conversation, id, language))
      return reply(ToolResult::error(codes::kInvalidArguments, "this conversation has the most code contexts it may; "
                                                               "delete one with code_context_delete"));
  }
  const auto& limits = sandboxes.limits();
  auto timeout = milliseconds(args.value("timeout_ms", static_cast<std::int64_t>(limits.default_timeout.count())));
  timeout = std::clamp(timeout, milliseconds(1), limits.max_timeout);
  const std::string code = args.value("code", "");
  json params = {{"context", id}, {"language", language}, {"code", code}, {"timeout_ms", timeout.count()}};
  AgentCalls calls(lease->agent(), context);
  auto outcome = calls.call("code.run", params, timeout + kSlack);
  bool restarted = false;
  if (outcome.error && outcome.error->code() == codes::kContextNotFound && !context->cancelled()) {
    // The box does not have it (new, or forgotten since): start it and replay.
    auto cells = sandboxes.code_cells(conversation, id);
    params["create"] = true;
    params["replay"] = cells;
    restarted = !cells.empty();
    outcome = calls.call("code.run", std::move(params), timeout * static_cast<int>(cells.size() + 1) + kSlack);
  }
  if (outcome.error) return reply(error_result(*outcome.error));
  ToolResult result = read_reply(*calls.client, [&] {
    json error = error_of(outcome.result);
    bool kept = true;
    if (error.is_null()) {
      try {
        kept = sandboxes.add_code_cell(conversation, id, code);
      } catch (const std::exception& e) {
        spdlog::warn("code_run: could not keep a cell of context {} for replay: {}", id, e.what());
        kept = false;
      }
    }
    // Bytes: the agent's cut counts characters, which may be up to 4 bytes each.
    return cell_result(outcome.result, language, restarted, kept, 4 * limits.inline_output_chars);
  });
  with_notice(result, lease->notice());
  lease.reset();
  reply(std::move(result));
}

// Runs job(sandboxes) off the dispatcher; SandboxError and catalog failures become error results.
void blocking_tool(Registry& registry, const Services& services, const char* name,
                   std::function<void(sandbox::Sandboxes&, const json&, const std::shared_ptr<CallContext>&, const ToolReply&)> job) {
  registry.add(name, [services, job = std::move(job)](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    run_blocking([sandboxes, args, context, reply, job] {
      try {
        job(*sandboxes, args, context, reply);
      } catch (const SandboxError& e) {
        reply(error_result(e));
      } catch (const std::exception& e) {
        reply(ToolResult::error(codes::kInternal, e.what()));
      }
    });
  });
}

}  // namespace

void register_code_tools(Registry& registry, const Services& services) {
  blocking_tool(registry, services, "code_run", run_code);
  blocking_tool(registry, services, "code_context_create",
                [](sandbox::Sandboxes& sandboxes, const json& args, const std::shared_ptr<CallContext>& context,
                   const ToolReply& reply) {
                  const std::string& conversation = context->conversation();
                  auto lease = sandboxes.acquire(conversation, {});
                  std::string language = args.value("language", "python");
                  std::string id = new_context_id();
                  if (!sandboxes.add_code_context(conversation, id, language))
                    return reply(ToolResult::error(codes::kInvalidArguments,
                                                   "this conversation has the most code contexts it may; delete one "
                                                   "with code_context_delete"));
                  AgentCalls calls(lease->agent(), context);
                  auto outcome = calls.call("code.create", {{"context", id}, {"language", language}}, kSlack);
                  if (outcome.error) {
                    sandboxes.remove_code_context(conversation, id);
                    return reply(error_result(*outcome.error));
                  }
                  ToolResult result = ToolResult::ok({{"context", id}, {"language", language}},
                                                     "Created " + language + " context " + json(id).dump() +
                                                         "; code_run with context " + json(id).dump() + " runs code in it");
                  with_notice(result, lease->notice());
                  reply(std::move(result));
                });
  blocking_tool(registry, services, "code_context_list",
                [](sandbox::Sandboxes& sandboxes, const json&, const std::shared_ptr<CallContext>& context,
                   const ToolReply& reply) {
                  const std::string& conversation = context->conversation();
                  // Never starts or restores the sandbox: a stopped one runs no interpreter.
                  std::map<std::string, bool> running;
                  if (auto agent = sandboxes.running_agent(conversation)) {
                    json r = agent->call("code.list", json::object(), kSlack);
                    ToolResult bad = read_reply(*agent, [&] {
                      for (const auto& c : agent_array(r, "contexts"))
                        running[string_at(c, "context")] = bool_at(c, "running");
                      return ToolResult::ok({}, "");
                    });
                    if (bad.is_error) return reply(std::move(bad));
                  }
                  json list = json::array();
                  std::string text;
                  for (const auto& c : sandboxes.code_contexts(conversation)) {
                    bool up = running.count(c.id) && running[c.id];
                    list.push_back({{"context", c.id}, {"language", c.language}, {"cells", c.cells}, {"running", up}});
                    text += json(c.id).dump() + "  " + c.language + ", " + std::to_string(c.cells) + " cell(s) kept, " +
                            (up ? "running" : "not running (started again, with its cells replayed, by code_run)") + "\n";
                  }
                  if (text.empty()) text = "No code contexts (code_run makes the language's default one).";
                  reply(ToolResult::ok({{"contexts", list}}, text));
                });
  blocking_tool(registry, services, "code_context_delete",
                [](sandbox::Sandboxes& sandboxes, const json& args, const std::shared_ptr<CallContext>& context,
                   const ToolReply& reply) {
                  const std::string& conversation = context->conversation();
                  std::string id = args.value("context", "");
                  if (!sandboxes.remove_code_context(conversation, id)) return reply(no_context(id));
                  if (auto agent = sandboxes.running_agent(conversation)) {
                    try {
                      agent->call("code.delete", {{"context", id}}, kSlack);
                    } catch (const SandboxError& e) {
                      spdlog::warn("code_context_delete: the agent did not end context {}: {}", id, e.what());
                    }
                  }
                  reply(ToolResult::ok({{"context", id}, {"deleted", true}}, "Deleted context " + json(id).dump()));
                });
}

}  // namespace agentbox::tools
