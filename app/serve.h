// `agentbox serve`, the default command: the MCP server on stdin/stdout, with
// the sandbox manager and the tools built from the command-line options.
#pragma once

#include <string>
#include <vector>

namespace agentbox::app {

// args: everything after "serve" (app/options.h). Returns the exit status;
// throws std::invalid_argument for a usage error.
int serve(const std::vector<std::string>& args);

}  // namespace agentbox::app
