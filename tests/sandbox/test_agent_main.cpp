// The agent as its own small executable, so the sandbox tests can start real
// sandboxes without the full server binary (which runs it as `agentbox agent`).
#include "sandbox/agent.h"

int main(int argc, char** argv) { return agentbox::sandbox::agent_main(argc, argv); }
