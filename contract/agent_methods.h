// What crosses the wall between the host and the in-box agent, by name: the
// JSON-RPC methods the agent serves (framed by rpc/, one JSON object a line,
// over the agent's stdin and stdout), the notifications each side sends, how
// a failure travels, and which calls the agent may serve on its reader
// thread. agent/ registers the methods (agent/methods.h); the host's agent
// client and tools/ call them. Everything the agent sends is untrusted input
// to the host (docs/design.md, "The wall between host and box").
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace agentbox::contract {

namespace methods {
inline constexpr const char* kHello = "hello";    // {pid, uid, version}
inline constexpr const char* kStatus = "status";  // {sessions, processes}
// Every other process of the box stopped with SIGSTOP, and continued
// (agent/freeze.h): the freeze where the host has no cgroup freezer.
inline constexpr const char* kBoxFreeze = "box.freeze";
inline constexpr const char* kBoxThaw = "box.thaw";
inline constexpr const char* kExec = "exec";
inline constexpr const char* kSessionCreate = "session.create";
inline constexpr const char* kSessionList = "session.list";
inline constexpr const char* kSessionDelete = "session.delete";
inline constexpr const char* kSessionExport = "session.export";
inline constexpr const char* kSessionImport = "session.import";
inline constexpr const char* kProcessStart = "process.start";
inline constexpr const char* kProcessList = "process.list";
inline constexpr const char* kProcessAdoptLost = "process.adopt_lost";
inline constexpr const char* kProcessRestoreServices = "process.restore_services";
inline constexpr const char* kProcessOutput = "process.output";
inline constexpr const char* kProcessWait = "process.wait";
inline constexpr const char* kProcessKill = "process.kill";
inline constexpr const char* kProcessWrite = "process.write";
// Terminals (agent/terminals.h).
inline constexpr const char* kTerminalStart = "terminal.start";
inline constexpr const char* kTerminalWrite = "terminal.write";
inline constexpr const char* kTerminalRead = "terminal.read";
inline constexpr const char* kTerminalResize = "terminal.resize";
inline constexpr const char* kTerminalKill = "terminal.kill";
inline constexpr const char* kTerminalList = "terminal.list";
inline constexpr const char* kTerminalAdoptLost = "terminal.adopt_lost";
inline constexpr const char* kFileRead = "file.read";
inline constexpr const char* kFileWrite = "file.write";
inline constexpr const char* kFileEdit = "file.edit";
inline constexpr const char* kFileStat = "file.stat";
inline constexpr const char* kFileMkdir = "file.mkdir";
inline constexpr const char* kFileDelete = "file.delete";
inline constexpr const char* kFileMove = "file.move";
inline constexpr const char* kFileList = "file.list";
inline constexpr const char* kFileSearch = "file.search";
// File watches (agent/watches.h). Not "file.": a wait for changes must
// not hold up its session's line.
inline constexpr const char* kWatchAdd = "watch.add";
inline constexpr const char* kWatchChanges = "watch.changes";
// Code contexts (agent/code_contexts.h).
inline constexpr const char* kCodeCreate = "code.create";
inline constexpr const char* kCodeRun = "code.run";
inline constexpr const char* kCodeDelete = "code.delete";
inline constexpr const char* kCodeList = "code.list";
// Every file method's name starts with this (they take a place in their
// session's line like exec, agent/session_queue.h).
inline constexpr std::string_view kFilePrefix = "file.";
}  // namespace methods

namespace notifications {
// Agent to host: output of a running exec, {request, stream, data, bytes};
// `request` is the id of the call it belongs to.
inline constexpr const char* kOutput = "output";
// Host to agent: stop the call whose id is params.id.
inline constexpr const char* kCancel = "cancel";
}  // namespace notifications

// The JSON-RPC error code of every failure the agent reports; the precise
// code (contract/errors.h) travels as error.data.code, a string.
inline constexpr int kAgentErrorCode = -32000;

// The agent's private runtime directory inside the box, a tmpfs the bwrap
// plan creates (sandbox/bwrap_plan.cpp) and the agent keeps its sessions in.
inline constexpr const char* kRuntimeDir = "/run/agentbox";

// Whether a file method with these params is bounded and never waits, so it
// may be served on a reader thread: the agent's (agent/agent.cpp) and the
// server's stdin reader (tools/file_tools.cpp) use this one rule. Not
// file.move (across mounts it copies a tree), list, search or edit; not a
// read by line range (found by reading from the file's start), a write with
// sync (an fsync waits for the disk) or a recursive delete.
bool quick_file_call(std::string_view method, const nlohmann::json& params);

}  // namespace agentbox::contract
