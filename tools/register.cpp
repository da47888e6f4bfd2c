#include "tools/register.h"

namespace agentbox::tools {

void register_sandbox_tools(Registry& registry);
void register_debug_tools(Registry& registry);

void register_all(Registry& registry, const Services& services) {
  register_sandbox_tools(registry);
  if (services.test_tools) register_debug_tools(registry);
}

}  // namespace agentbox::tools
