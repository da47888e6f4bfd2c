// libFuzzer target: arbitrary bytes arrive from a sandbox's agent. A real
// AgentClient starts a stand-in for the sandbox (sh, which waits for the
// first request and then execs cat on the input), so the bytes travel the
// real pipe into the real reader and line handler while three calls are
// pending: one with an output sink that reads notifications the way the
// exec tool does, and callbacks that read results the way formatters do.
// Whatever the bytes, every call is answered exactly once and nothing
// escapes a thread (a throw there would abort the process).
#include "sandbox/agent_client.h"

#include <csignal>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>

namespace {

using agentbox::sandbox::AgentClient;
using agentbox::sandbox::LaunchSpec;
using json = nlohmann::json;

constexpr std::size_t kMaxInputBytes = 256 * 1024;

std::string input_file() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/agentbox-fuzz-agent-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) std::abort();
    close(fd);
    return std::string(tmpl);
  }();
  return path;
}

void feed(const std::string& input) {
  std::ofstream(input_file(), std::ios::binary | std::ios::trunc) << input;
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", "read first; exec cat \"$0\"", input_file()};
  auto client = AgentClient::attach([&spec] { return agentbox::sandbox::launch(spec); }, "fuzz");

  constexpr int kCalls = 3;
  std::atomic<int> answered{0};
  std::promise<void> all;
  auto done = [&](AgentClient::Outcome outcome) {
    // A formatter's reads: they may throw on a malformed result, which the
    // client must take as the agent's fault, not let out of its thread.
    if (!outcome.error) (void)outcome.result.value("stdout", "");
    if (++answered == kCalls) all.set_value();
  };
  auto sink = [](const std::string&, const json& params) {
    (void)params.value("data", "");
    (void)params.value("bytes", 0.0);
  };
  for (int i = 0; i < kCalls; ++i)
    client->call_async("exec", json{{"command", "true"}}, std::chrono::seconds(30), done,
                       i == 1 ? AgentClient::NoteSink(sink) : AgentClient::NoteSink());
  // cat ends (or is killed for a bad line), the reader fails what is left.
  if (all.get_future().wait_for(std::chrono::seconds(30)) != std::future_status::ready) std::abort();
  if (answered != kCalls) std::abort();
  client->stop();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  // As `agentbox serve` does (app/serve.cpp): a box that closed its end shows
  // up as EPIPE on write, not a SIGPIPE that ends the process.
  std::signal(SIGPIPE, SIG_IGN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInputBytes) return -1;  // not added to the corpus
  feed(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
