// A test agent for malformed_line_test.cpp: the real agent (agent_main) runs
// in a child whose stdout passes through this process on its way to the
// server, over the real pipe. Lines pass unchanged until one carries the
// marker AGENTBOX-CORRUPT-<n> (a command printed it: the box decides, as
// hostile box code would); that line is replaced by bad line number n,
// which reuses the original line's id where it needs a real one.
#include "rpc/framing.h"
#include "agent/agent.h"

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using json = nlohmann::json;
namespace rpc = agentbox::rpc;

std::string deep(std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

std::string bad_line(int n, const json& id) {
  std::string i = id.dump();
  switch (n) {
    case 0: return "this is not JSON";
    case 1: return R"({"jsonrpc":"2.0","method":"output","params":{"request":"x","data":"y"}})";
    case 2: return R"({"jsonrpc":"2.0","id":987654321,"result":{"stdout":"forged"}})";
    case 3: return R"({"jsonrpc":"2.0","id":)" + i + R"(,"error":{"code":-32000,"message":"x","data":{"code":7}}})";
    case 4: return R"({"jsonrpc":"2.0","id":)" + i + R"(,"result":)" + deep(100000) + "}";
    case 5: return R"({"jsonrpc":"2.0","id":)" + i + R"(,"result":[1,2,3]})";
    case 6: return R"({"jsonrpc":"2.0","id":"abc","result":{}})";
    case 7: return R"({"jsonrpc":"2.0","id":)" + i + R"(,"method":"exec","params":{}})";
    case 8: return R"({"jsonrpc":"2.0","method":"output","params":{"request":)" + i + R"(,"data":5,"bytes":"many"}})";
    case 9: return std::string(70 << 20, 'x');  // over the 64 MiB line limit
    default: return "";
  }
}

}  // namespace

int main(int argc, char** argv) {
  int out[2];
  if (pipe(out) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    return agentbox::agent::agent_main(argc, argv);
  }
  close(out[1]);
  std::signal(SIGPIPE, SIG_IGN);
  rpc::LineReader reader(out[0], 64 << 20);
  while (auto line = reader.next()) {
    std::string text = line->text;
    auto marker = text.find("AGENTBOX-CORRUPT-");
    if (marker != std::string::npos) {
      int n = std::atoi(text.c_str() + marker + 17);
      json original = json::parse(text, nullptr, false);
      json id = original.is_object() ? original.value("id", json()) : json();
      if (id.is_null() && original.is_object() && original.contains("params"))
        id = original["params"].value("request", json());
      text = bad_line(n, id);
    }
    text.push_back('\n');
    if (rpc::write_all(STDOUT_FILENO, text) != 0) break;
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
