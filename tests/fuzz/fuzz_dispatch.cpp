// libFuzzer target: arbitrary bytes arrive on the server's stdin. They are
// framed by the real LineReader (through a pipe), fed line by line to a fresh
// Dispatcher + McpServer with the test tools, and the server is shut down
// before the next input, so nothing carries over and debug_sleep never sleeps
// past the input (shutdown cancels it). The same bytes also go through the
// message classifier and the transcript parser and matcher.
#include "rpc/framing.h"
#include "rpc/message.h"
#include "server/dispatcher.h"
#include "server/mcp_server.h"
#include "server/transcript.h"
#include "tools/register.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>

namespace {

using agentbox::server::json;
namespace rpc = agentbox::rpc;
namespace server = agentbox::server;
namespace tools = agentbox::tools;

// Keeps the work per input bounded: a pipe holds 64 KiB without a reader, and
// each line may start a pooled call.
constexpr std::size_t kMaxInputBytes = 60 * 1024;
constexpr int kMaxLines = 64;
constexpr std::size_t kMaxLineBytes = 2048;

// Serialises what the server sends (that is part of what can go wrong) and
// drops it.
class DiscardingOutput : public server::Output {
 public:
  void send(const json& message) override { sink_ += rpc::serialize(message).size(); }

 private:
  std::atomic<std::size_t> sink_{0};
};

const tools::Registry& registry() {
  static tools::Registry registry;
  static bool registered = [] {
    tools::register_all(registry, {.test_tools = true});
    return true;
  }();
  (void)registered;
  return registry;
}

void serve(std::string_view input) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  if (rpc::write_all(fds[1], input) != 0) std::abort();
  ::close(fds[1]);

  DiscardingOutput output;
  server::Dispatcher dispatcher(output, {.workers = 2});
  server::McpServer mcp(dispatcher, registry(), {.default_conversation = "fuzz", .server_version = "0.0.0"});
  rpc::LineReader reader(fds[0], kMaxLineBytes);
  int lines = 0;
  while (auto line = reader.next()) {
    if (++lines > kMaxLines) break;
    if (line->oversized)
      dispatcher.handle_oversized(line->bytes, kMaxLineBytes);
    else
      dispatcher.handle_line(line->text);
  }
  ::close(fds[0]);
  dispatcher.shutdown();
}

void classify(std::string_view input) {
  std::size_t start = 0;
  for (int lines = 0; start <= input.size() && lines < kMaxLines; ++lines) {
    std::size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    auto parsed = rpc::parse_message(input.substr(start, end - start));
    // Whatever is invalid must still be answerable.
    if (auto* bad = std::get_if<rpc::Invalid>(&parsed)) (void)rpc::serialize(rpc::make_error(bad->id, bad->error));
    start = end + 1;
  }
}

void match(const std::string& input) {
  try {
    (void)server::parse_transcript(input);
  } catch (const std::runtime_error&) {
    // A mistake in the transcript, reported with its line: expected.
  }
  json value = json::parse(input, nullptr, false);
  if (value.is_discarded()) return;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  // Regular expressions from the input would test std::regex, not this code.
  if (text.find("<<re:") != std::string::npos) return;

  std::map<std::string, json> captures;
  (void)server::match_json(value, value, captures);
  (void)server::match_json(value, json{{"jsonrpc", "2.0"}, {"id", 1}, {"result", {{"tools", json::array()}}}},
                           captures);
  (void)server::substitute_captures(value, captures);
  json loose = server::loosen_recorded(value);
  // Without placeholders in the input, a value matches itself and its own
  // loosened recording.
  if (text.find("<<") == std::string::npos) {
    std::map<std::string, json> fresh;
    if (server::match_json(value, value, fresh)) std::abort();
    if (server::match_json(loose, value, fresh)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  registry();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInputBytes) return -1;  // not added to the corpus
  std::string input(reinterpret_cast<const char*>(data), size);
  serve(input);
  classify(input);
  match(input);
  return 0;
}
