// The in-sandbox agent: `agentbox agent [options]`, run by bwrap as the
// sandbox's first process. It speaks newline-delimited JSON-RPC on its
// stdin/stdout (rpc/framing.h), installs the seccomp filter and rlimits on
// itself before anything else, and serves the methods of agent_methods.h.
// It exits when its stdin closes, taking every process of the sandbox along.
#pragma once

namespace agentbox::sandbox {

// argv[0] is ignored; the options are those of agent_limit_args() plus
// --no-seccomp (tests of the agent outside a sandbox only).
int agent_main(int argc, char** argv);

}  // namespace agentbox::sandbox
