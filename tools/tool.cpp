#include "tools/tool.h"

#include "contract/errors.h"

#include <spdlog/spdlog.h>

#include <atomic>

namespace agentbox::tools {

ToolResult ToolResult::ok(json structured, std::string text) {
  return ToolResult{std::move(structured), std::move(text), false, nullptr};
}

ToolResult ToolResult::error(std::string code, std::string message, json details) {
  json err = json::object();
  if (details.is_object()) err = std::move(details);
  err["code"] = code;
  err["message"] = message;
  return ToolResult{nullptr, code + ": " + message, true, std::move(err)};
}

struct ToolReply::State {
  std::string tool;
  Sink sink;
  std::atomic<bool> replied{false};

  ~State() {
    if (!replied.load())
      sink(ToolResult::error(codes::kInternal, "tool '" + tool + "' finished without an answer (a server bug)"));
  }
};

ToolReply::ToolReply(std::string tool, Sink sink)
    : state_(std::make_shared<State>()) {
  state_->tool = std::move(tool);
  state_->sink = std::move(sink);
}

void ToolReply::operator()(ToolResult result) const {
  if (state_->replied.exchange(true)) {
    spdlog::error("tool '{}' answered twice; the second answer is dropped", state_->tool);
    return;
  }
  state_->sink(std::move(result));
}

}  // namespace agentbox::tools
