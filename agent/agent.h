// The in-box agent: `agentbox-agent [options]` (or `agentbox agent`), run by
// bwrap as the sandbox's first process. It speaks newline-delimited JSON-RPC
// on its stdin/stdout (rpc/framing.h) and serves the methods of
// contract/agent_methods.h. It exits when its stdin closes, taking every
// process of the sandbox along.
#pragma once

#include "agent/methods.h"

namespace agentbox::agent {

// The setup checklist, then serve (main.cpp). argv[0] is ignored; the
// options are those of contract/limits.h.
int agent_main(int argc, char** argv);

// Serves requests on stdin/stdout until stdin closes (agent.cpp). Each
// request runs on a thread of its own, taken from a cache; small bounded
// file calls are served on the reader thread.
int serve(const AgentConfig& config);

}  // namespace agentbox::agent
