// How a tool reaches the conversation's sandbox: on a thread of its own (a
// sandbox may have to start, which takes tens of milliseconds), lease the
// sandbox (sandbox/sandboxes.h), call the agent, and turn the outcome into a
// ToolResult. Sandbox errors become error results carrying their code
// (docs/protocol.md, "Error results"); a restart notice is passed on to the model.
#pragma once

#include "sandbox/sandboxes.h"
#include "tools/register.h"

#include <chrono>
#include <functional>

namespace agentbox::tools {

// Builds the tool result from the agent's result object (moved in: it may hold a megabyte page).
using Formatter = std::function<ToolResult(json result)>;

struct AgentCall {
  std::string method;
  json params;                                 // the tool arguments minus "conversation"
  std::chrono::milliseconds timeout{60'000};   // how long the server waits for the agent
  // Streams agent notifications (exec output) to the caller as progress.
  bool progress = false;
};

// Runs call in the caller's sandbox and replies with format(result).
void call_agent(const Services& services, std::shared_ptr<CallContext> context, ToolReply reply, AgentCall call,
                Formatter format);

// How long the server waits for the agent, from the tool's arguments.
using AgentTimeout = std::function<std::chrono::milliseconds(const json& arguments)>;
AgentTimeout fixed_timeout(std::chrono::milliseconds timeout);

// Binds a tool that is one agent method: the tool's arguments (agent_params)
// go to the agent as they are and format shapes its result. run_inline as
// in Registry::add. The file, process and session tools are bound with it.
void bind_agent_tool(Registry& registry, const Services& services, const char* tool, const char* method,
                     AgentTimeout timeout, Formatter format, Registry::RunInline run_inline = {});

// result[key] when it is an array, for formatters. The agent's result is
// written in the box (docs/sandbox.md, "The wall between host and box"):
// operator[] on a const object that lacks key is undefined behaviour, this
// throws instead, and call_agent turns whatever a formatter throws into an
// error result that ends the sandbox.
const json& agent_array(const json& result, const char* key);

// The tool arguments the agent takes: everything but "conversation".
json agent_params(const json& arguments);

ToolResult error_result(const SandboxError& error);

// A snapshot as tools show it (snapshot_list, sandbox_status).
json snapshot_json(const persistence::SnapshotRecord& snapshot);

// One page of a list the server answers from its own records: the entries
// after the one whose `key` is `cursor` (all with an empty cursor) that fit
// the inline cap as a result shows them, a text line and its JSON each
// (docs/files.md, "What hosts show"). Sets `next` to the next cursor, empty
// when the rest fit; false when no entry has the cursor.
bool page_of(json& entries, const char* key, const std::string& cursor, std::size_t cap, std::string& next);

// The error result for a cursor page_of did not find.
ToolResult unknown_cursor(const std::string& cursor);

// Runs a job that may block (a sandbox start, restore, snapshot or destroy)
// off the dispatcher's pool, on a reused thread.
void run_blocking(std::function<void()> job);

// What the network proxy denied the conversation's box from `since` to
// `until` (docs/design.md section 10, "Deny reasons"), as
// result["network_denied"] [{host, port, reason}], and a line per denial
// appended to text; nothing when there were none (network_tools.cpp).
void add_network_denials(json& result, std::string& text, sandbox::Sandboxes& sandboxes,
                         const std::string& conversation, std::chrono::system_clock::time_point since,
                         std::chrono::system_clock::time_point until = std::chrono::system_clock::time_point::max());

// The sandboxes, or null after replying with the error result: none on this
// server (SANDBOX_UNAVAILABLE), or the manager could not start.
sandbox::Sandboxes* sandboxes_or_reply(const Services& services, const ToolReply& reply);

}  // namespace agentbox::tools
