// What a tool is: a definition read from its schema file, and a function that
// serves a call. Tools see a CallContext (who is calling, progress, cancellation)
// and answer through a ToolReply exactly once, possibly from another thread.
// Nothing here knows about JSON-RPC framing or MCP protocol eras.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace agentbox::tools {

using json = nlohmann::json;

// The outcome of a tool call. A command that ran and failed is still ok();
// error() is for calls that could not do their work (docs/design.md). An
// error has no structured result: the SDK checks structuredContent against the
// outputSchema even on errors, so the error object travels in the result's
// _meta (docs/protocol.md, "Error results").
struct ToolResult {
  json structured = json::object();  // ok(): matches the tool's outputSchema
  std::string text;                  // shown to the model; for an error "CODE: message"
  bool is_error = false;
  json error_object;                 // error(): {code, message, ...details}
  // MCP content blocks after the text, e.g. {type: "image", data, mimeType}
  // (code_run's figures); the tool bounds them.
  json extra_content = json::array();

  static ToolResult ok(json structured, std::string text);
  // code is one of the documented error codes (FILE_NOT_FOUND, SESSION_NOT_FOUND, ...);
  // details (an object) adds fields to the error object, e.g. {"field": "arguments.path"}.
  static ToolResult error(std::string code, std::string message, json details = nullptr);
};

// Identity and call-scoped services handed to a tool.
class CallContext {
 public:
  virtual ~CallContext() = default;

  // The conversation this call belongs to, resolved by the server from the
  // tool argument, the host's _meta, flags and environment (docs/design.md section 3).
  virtual const std::string& conversation() const = 0;

  // Reports progress; does nothing when the caller asked for none. Values that
  // do not increase are dropped (MCP requires strictly increasing progress).
  virtual void progress(double done, std::optional<double> total, const std::string& message) = 0;

  virtual bool cancelled() const = 0;
  // Runs fn once when the call is cancelled (at once if it already was). Used to
  // kill the processes a call started.
  virtual void on_cancel(std::function<void()> fn) = 0;
  // The call has been handed to the sandbox: the next call of the same
  // conversation may go (calls naming a session keep their arrival order,
  // docs/protocol.md "Order"). Done anyway at the answer.
  virtual void release_order() {}
};

// Answers one call. Copies share one state: the first call wins, later ones are
// dropped and logged; if every copy is destroyed without an answer the call gets
// an internal error (clangd's ReplyOnce).
class ToolReply {
 public:
  using Sink = std::function<void(ToolResult)>;
  ToolReply(std::string tool, Sink sink);
  void operator()(ToolResult result) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

using ToolFunction =
    std::function<void(const json& arguments, std::shared_ptr<CallContext> context, ToolReply reply)>;

struct ToolDefinition {
  std::string name;
  json definition;  // the MCP tool object: name, title, description, inputSchema, outputSchema, annotations
};

}  // namespace agentbox::tools
