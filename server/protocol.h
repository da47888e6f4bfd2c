// MCP protocol types the server reads and writes, named as in the specification,
// with parsing that names the offending field (clangd's Protocol.h). Parsing
// throws ProtocolError, which the dispatcher turns into a JSON-RPC error reply.
#pragma once

#include "rpc/message.h"

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace agentbox::server {

using json = nlohmann::json;

// Versions negotiated through initialize, newest first.
inline constexpr std::array<std::string_view, 3> kInitializeVersions = {"2025-11-25", "2025-06-18",
                                                                         "2025-03-26"};
// Versions spoken per request through _meta (no initialize).
inline constexpr std::array<std::string_view, 1> kModernVersions = {"2026-07-28"};

inline constexpr std::string_view kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
inline constexpr std::string_view kMetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities";
inline constexpr std::string_view kMetaClientInfo = "io.modelcontextprotocol/clientInfo";
inline constexpr std::string_view kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

// The error codes MCP adds to JSON-RPC's own (rpc::ErrorCode).
namespace mcp_error {
inline constexpr rpc::ErrorCode ServerNotInitialized = static_cast<rpc::ErrorCode>(-32002);
inline constexpr rpc::ErrorCode UnsupportedProtocolVersion = static_cast<rpc::ErrorCode>(-32022);
}  // namespace mcp_error

// A JSON-RPC error raised while serving a request.
class ProtocolError : public std::runtime_error {
 public:
  ProtocolError(rpc::ErrorCode code, std::string message, json data = nullptr)
      : std::runtime_error(message), error_{code, std::move(message), std::move(data)} {}
  const rpc::Error& error() const { return error_; }

 private:
  rpc::Error error_;
};

// Reads fields of a params object, throwing InvalidParams that names the field
// ("params.arguments: must be an object").
class ParamReader {
 public:
  ParamReader(const json& object, std::string path);

  std::string required_string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  json optional_object(std::string_view key) const;  // {} when absent
  bool has(std::string_view key) const;
  const json& get(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, std::string_view problem) const;

 private:
  const json& object_;
  std::string path_;
};

struct Implementation {
  std::string name;
  std::string version;
};

struct InitializeParams {
  std::string protocol_version;
  json capabilities = json::object();
  Implementation client_info;
};
InitializeParams parse_initialize_params(const json& params);

struct CallToolParams {
  std::string name;
  json arguments = json::object();
};
CallToolParams parse_call_tool_params(const json& params);

// RFC 5424 level names used by logging/setLevel and notifications/message.
// Returns the spdlog level, or nullopt for an unknown name.
std::optional<int> parse_log_level(std::string_view name);
std::string_view log_level_name(int spdlog_level);

// The per-request _meta fields the server cares about.
struct RequestMeta {
  json raw = json::object();
  std::optional<json> progress_token;          // string or integer
  std::optional<std::string> protocol_version;  // set: the request speaks the modern era
  json client_capabilities = json::object();
};
RequestMeta parse_request_meta(const json& params);

// The 2026 tasks extension, as a request declares it in its per-request
// capabilities, and the -32021 error for a request that needed it (`what`
// says what needed it).
inline constexpr std::string_view kTasksExtension = "io.modelcontextprotocol/tasks";
bool declares_tasks_extension(const RequestMeta& meta);
ProtocolError missing_tasks_extension(const std::string& what);

bool is_supported_initialize_version(std::string_view version);
bool is_supported_modern_version(std::string_view version);
json supported_versions_json();  // every version, newest first

}  // namespace agentbox::server
