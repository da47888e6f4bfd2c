// session_create, session_list, session_delete: shell sessions of the
// conversation's sandbox (the agent keeps them; see agent/sessions.h).
#include "tools/sandbox_call.h"

namespace agentbox::tools {

void register_session_tools(Registry& registry, const Services& services) {
  const AgentTimeout normal = fixed_timeout(std::chrono::milliseconds(60'000));
  bind_agent_tool(registry, services, "session_create", "session.create", normal, [](const json& r) {
    return ToolResult::ok(r, "Created session '" + r.value("session", "") + "' in " + r.value("cwd", ""));
  });
  registry.add("session_list", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    std::string cursor = args.value("cursor", "");
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    std::size_t cap = sandboxes->limits().inline_output_chars;
    call_agent(services, context, reply, {"session.list", json::object()}, [cursor, cap](json r) {
      std::string next;
      agent_array(r, "sessions");  // a wrong shape from the box is an error, not a null list
      if (!page_of(r["sessions"], "session", cursor, cap, next)) return unknown_cursor(cursor);
      std::string text;
      for (const auto& s : agent_array(r, "sessions")) text += s.value("session", "") + "  " + s.value("cwd", "") + "\n";
      if (!next.empty()) {
        r["truncated"] = true;
        r["next_cursor"] = next;
        text += "[" + std::to_string(r["sessions"].size()) + " sessions shown; next: session_list cursor " + json(next).dump() + "]";
      }
      return ToolResult::ok(r, text);
    });
  });
  bind_agent_tool(registry, services, "session_delete", "session.delete", normal, [](const json& r) {
    return ToolResult::ok(r, "Deleted session '" + r.value("session", "") + "'");
  });
}

}  // namespace agentbox::tools
