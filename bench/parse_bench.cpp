// What classifying one protocol line costs (rpc::parse_message, the first
// step of every line on stdin and from an agent): typical tools/call lines,
// a line with a float (the nlohmann fallback), a 1 MiB file_write, and an
// agent's exec reply. Used to check that the nesting limit
// (docs/protocol.md, "Nesting depth") costs a normal line nothing.
// Usage: parse_bench [rounds, default 200000]
#include "rpc/message.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  std::string line;
  int rounds_divisor;
};

std::vector<Case> cases() {
  std::string page(1 << 20, 'x');
  return {
      {"exec call", R"({"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"exec","arguments":)"
                    R"({"command":"ls -la /workspace","timeout_ms":30000},"_meta":{"progressToken":17,)"
                    R"("claudecode/toolUseId":"toolu_01ABCDEFGHIJKLMNOPQRSTUV"}}})", 1},
      {"file_read call", R"({"jsonrpc":"2.0","id":"r-42","method":"tools/call","params":{"name":"file_read",)"
                         R"("arguments":{"path":"/workspace/src/main.cpp","offset":0,"length":30000}}})", 1},
      {"float (fallback)", R"({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,)"
                           R"("progress":0.5,"total":1.0,"message":"half way"}})", 1},
      {"agent exec reply", R"({"jsonrpc":"2.0","id":123,"result":{"stdout":"total 8\ndrwxr-xr-x 2 user user )"
                           R"(4096 Dec  1 09:00 .\n","stderr":"","exit_code":0,"success":true,"timed_out":false,)"
                           R"("duration_ms":4,"session":"default","cwd":"/workspace"}})", 1},
      {"1 MiB file_write", R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"file_write",)"
                           R"("arguments":{"path":"/workspace/big.txt","content":")" + page + "\"}}}", 2000},
  };
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 200000;
  for (const auto& c : cases()) {
    int n = std::max(1, rounds / c.rounds_divisor);
    std::size_t sink = 0;
    // Five runs, the best kept: the machine is shared.
    double best = 1e300;
    for (int run = 0; run < 5; ++run) {
      auto start = Clock::now();
      for (int i = 0; i < n; ++i) sink += agentbox::rpc::parse_message(c.line).index();
      best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n);
    }
    std::printf("%-18s %8zu bytes  %10.0f ns/line  (%d lines, best of 5)%s\n", c.name, c.line.size(), best, n,
                sink == 12345 ? " " : "");
  }
}
