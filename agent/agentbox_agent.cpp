// The in-sandbox agent as an executable of its own (agentbox-agent), linked
// statically against the agent library only: a sandbox start then costs one
// small exec, not the loading of the server's libraries (SQLite, libarchive,
// spdlog...) that `agentbox agent` would map.
#include "agent/agent.h"

int main(int argc, char** argv) { return agentbox::agent::agent_main(argc, argv); }
