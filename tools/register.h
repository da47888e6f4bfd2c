// Binds every tool the server offers to its schema. The server calls this once
// at start-up with the services the tools drive.
#pragma once

#include "tools/registry.h"

#include <functional>

namespace agentbox::sandbox {
class Sandboxes;
}

namespace agentbox::tools {

struct Services {
  bool test_tools = false;  // also register the fixtures under schemas/test/
  // The sandboxes the sandbox-scoped tools run in (sandbox/sandboxes.h). The
  // manager behind them starts in the background (catalog, crash recovery)
  // so the server answers initialize at once: this waits for it, and throws
  // SandboxError when it could not start.
  // Empty: those tools answer SANDBOX_UNAVAILABLE (sandbox_status: "none").
  std::function<sandbox::Sandboxes*()> sandboxes;
  // True once sandboxes() answers without waiting.
  std::function<bool()> sandboxes_ready;
};

void register_all(Registry& registry, const Services& services);

}  // namespace agentbox::tools
