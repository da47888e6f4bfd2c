// The agent (and doctor) as a small executable of their own, so the sandbox
// tests can start real sandboxes without the full server binary, which runs
// them as `agentbox agent` and `agentbox doctor`.
#include "sandbox/agent.h"
#include "sandbox/doctor.h"

#include <string>

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "doctor") return agentbox::sandbox::doctor_main(argc - 1, argv + 1);
  return agentbox::sandbox::agent_main(argc, argv);
}
