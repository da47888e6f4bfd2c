// What one thread hand-off costs on this host (docs/files.md, "Why the 5x
// target is still missed"): two processes bounce a byte over a pair of pipes,
// blocking in read (each bounce wakes the other side, usually on the other
// CPU), pinned to one CPU, and spinning on poll instead of sleeping.
// A small tool call makes four such hand-offs (client -> server -> agent ->
// server -> client).
// Usage: wakeup_latency [round trips, default 20000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

void wait_readable(int fd, bool spin) {
  if (!spin) return;  // read() blocks
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 0) == 0) {
  }
}

double bounce(int n, bool spin, bool one_cpu) {
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) std::exit(1);
  cpu_set_t all, first;
  sched_getaffinity(0, sizeof all, &all);
  CPU_ZERO(&first);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &first);
      break;
    }
  if (one_cpu) sched_setaffinity(0, sizeof first, &first);
  char c = 'x';
  pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < n; ++i) {
      wait_readable(to_child[0], spin);
      if (read(to_child[0], &c, 1) != 1 || write(to_parent[1], &c, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (write(to_child[1], &c, 1) != 1) std::exit(1);
    wait_readable(to_parent[0], spin);
    if (read(to_parent[0], &c, 1) != 1) std::exit(1);
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / n;
  waitpid(child, nullptr, 0);
  sched_setaffinity(0, sizeof all, &all);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::printf("pipe round trip between two processes, %d round trips (2 hand-offs each):\n", n);
  std::printf("  blocking read, any CPU:  %6.1f us\n", bounce(n, false, false));
  std::printf("  blocking read, one CPU:  %6.1f us\n", bounce(n, false, true));
  std::printf("  spinning on poll:        %6.1f us\n", bounce(n, true, false));
  return 0;
}
