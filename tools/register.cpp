#include "tools/register.h"

namespace agentbox::tools {

void register_sandbox_tools(Registry& registry, const Services& services);
void register_exec_tool(Registry& registry, const Services& services);
void register_session_tools(Registry& registry, const Services& services);
void register_process_tools(Registry& registry, const Services& services);
void register_terminal_tools(Registry& registry, const Services& services);
void register_file_tools(Registry& registry, const Services& services);
void register_watch_tools(Registry& registry, const Services& services);
void register_snapshot_tools(Registry& registry, const Services& services);
void register_network_tools(Registry& registry, const Services& services);
void register_port_tools(Registry& registry, const Services& services);
void register_code_tools(Registry& registry, const Services& services);
void register_debug_tools(Registry& registry);

void register_all(Registry& registry, const Services& services) {
  register_sandbox_tools(registry, services);
  register_exec_tool(registry, services);
  register_session_tools(registry, services);
  register_process_tools(registry, services);
  register_terminal_tools(registry, services);
  register_snapshot_tools(registry, services);
  register_file_tools(registry, services);
  register_watch_tools(registry, services);
  register_network_tools(registry, services);
  register_port_tools(registry, services);
  register_code_tools(registry, services);
  if (services.test_tools) register_debug_tools(registry);
}

}  // namespace agentbox::tools
