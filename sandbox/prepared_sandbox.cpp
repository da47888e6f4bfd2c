// PreparedSandbox's gate (manager.h), apart from manager.cpp to keep that
// file short.
#include "sandbox/manager.h"

#include <csignal>
#include <unistd.h>

namespace agentbox::sandbox {

void PreparedSandbox::release_gate() {
  if (gate < 0) return;
  // A launcher that died leaves no reader: EPIPE, not a SIGPIPE that would
  // end a process that does not ignore it (tests, benches; serve does).
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  if (write(gate, "\n", 1) < 0 && errno == EPIPE && !sigismember(&old, SIGPIPE)) {
    timespec now{0, 0};
    sigtimedwait(&pipe_signal, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(gate);
  gate = -1;
}

}  // namespace agentbox::sandbox
