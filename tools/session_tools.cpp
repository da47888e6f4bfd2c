// session_create, session_list, session_delete: shell sessions of the
// conversation's sandbox (the agent keeps them; see sandbox/agent_sessions.h).
#include "tools/sandbox_call.h"

namespace agentbox::tools {

void register_session_tools(Registry& registry, const Services& services) {
  registry.add("session_create", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    call_agent(services, context, reply, {"session.create", agent_params(args)}, [](const json& r) {
      return ToolResult::ok(r, "Created session '" + r.value("session", "") + "' in " + r.value("cwd", ""));
    });
  });
  registry.add("session_list", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    (void)args;
    call_agent(services, context, reply, {"session.list", json::object()}, [](const json& r) {
      std::string text;
      for (const auto& s : agent_array(r, "sessions")) text += s.value("session", "") + "  " + s.value("cwd", "") + "\n";
      return ToolResult::ok(r, text);
    });
  });
  registry.add("session_delete", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    call_agent(services, context, reply, {"session.delete", agent_params(args)}, [](const json& r) {
      return ToolResult::ok(r, "Deleted session '" + r.value("session", "") + "'");
    });
  });
}

}  // namespace agentbox::tools
