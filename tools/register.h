// Binds every tool the server offers to its schema. The server calls this once
// at start-up with the services the tools drive.
#pragma once

#include "tools/registry.h"

namespace agentbox::sandbox {
class Manager;
}

namespace agentbox::tools {

struct Services {
  bool test_tools = false;  // also register the fixtures under schemas/test/
  // The sandboxes the sandbox-scoped tools run in. Null: those tools answer
  // SANDBOX_UNAVAILABLE (sandbox_status reports state "none").
  sandbox::Manager* sandboxes = nullptr;
};

void register_all(Registry& registry, const Services& services);

}  // namespace agentbox::tools
