// Which conversation a tool call belongs to (docs/design.md sections 3 and 8): the
// tool's `conversation` argument, then the host's _meta (VS Code's
// conversationId, Codex's threadId and turn metadata), then the server-wide
// default (--conversation, AGENTBOX_CONVERSATION, CLAUDE_CODE_SESSION_ID,
// "default").
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace agentbox::server {

// The server-wide fallback, from the flag and the environment.
std::string default_conversation(const std::optional<std::string>& flag);

// The conversation for one call; `fallback` comes from default_conversation().
std::string resolve_conversation(const nlohmann::json& arguments, const nlohmann::json& meta,
                                 const std::string& fallback);

}  // namespace agentbox::server
