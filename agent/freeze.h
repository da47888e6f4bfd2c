// Freezing the box from inside, where the host has no cgroup freezer for it
// (a normal user on cgroup v1, as on the project's machines): the agent is
// pid 1 of the box's pid namespace, so kill(-1, SIGSTOP) stops every other
// process of the box, and nothing else (a pid namespace sees only its own;
// pid 1 and the caller are skipped). SIGSTOP cannot be caught, blocked or
// ignored; a process in the middle of a system call stops once it returns,
// so no write is cut in half. The freeze returns once every process is seen
// stopped in /proc. Differences from the cgroup freezer, written down in
// docs/design.md section 9: a parent can see a child stop and continue
// (waitpid WUNTRACED, SIGCHLD), and a process someone stopped on purpose is
// continued by the thaw.
#pragma once

#include "agent/methods.h"

namespace agentbox::agent {

// box.freeze -> {stopped, waited_ms}; box.thaw -> {continued}.
void register_freeze_methods(MethodTable& table);

}  // namespace agentbox::agent
