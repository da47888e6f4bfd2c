// Sandbox-level tools. Until the sandbox driver lands, a conversation never
// has a sandbox, and sandbox_status says so.
#include "tools/register.h"

namespace agentbox::tools {

void register_sandbox_tools(Registry& registry) {
  registry.add("sandbox_status", [](const json&, std::shared_ptr<CallContext> context, ToolReply reply) {
    json status = {{"conversation", context->conversation()},
                   {"sandbox", nullptr},
                   {"state", "none"},
                   {"sessions", json::array()},
                   {"processes", json::array()},
                   {"workspace_bytes", 0},
                   {"last_snapshot", nullptr}};
    reply(ToolResult::ok(status, "Conversation '" + context->conversation() +
                                     "' has no sandbox yet; the first command or file call starts one."));
  });
}

}  // namespace agentbox::tools
