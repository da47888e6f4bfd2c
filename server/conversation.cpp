#include "server/conversation.h"

#include <cstdlib>

namespace agentbox::server {

namespace {

std::optional<std::string> non_empty_string(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

// Codex sends its turn metadata as an object, and some versions as a JSON
// string holding that object.
std::optional<std::string> codex_thread(const nlohmann::json& meta) {
  if (!meta.is_object()) return std::nullopt;
  auto it = meta.find("x-codex-turn-metadata");
  if (it == meta.end()) return std::nullopt;
  if (it->is_string()) {
    auto parsed = nlohmann::json::parse(it->get<std::string>(), nullptr, false);
    return parsed.is_discarded() ? std::nullopt : non_empty_string(parsed, "thread_id");
  }
  return non_empty_string(*it, "thread_id");
}

}  // namespace

std::string default_conversation(const std::optional<std::string>& flag) {
  if (flag && !flag->empty()) return *flag;
  if (auto v = env("AGENTBOX_CONVERSATION")) return *v;
  if (auto v = env("CLAUDE_CODE_SESSION_ID")) return *v;
  return "default";
}

std::string resolve_conversation(const nlohmann::json& arguments, const nlohmann::json& meta,
                                 const std::string& fallback) {
  if (auto v = non_empty_string(arguments, "conversation")) return *v;
  if (auto v = non_empty_string(meta, "vscode.conversationId")) return *v;
  if (auto v = non_empty_string(meta, "threadId")) return *v;
  if (auto v = codex_thread(meta)) return *v;
  return fallback;
}

}  // namespace agentbox::server
