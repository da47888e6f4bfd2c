// JSON-RPC 2.0 messages: classifying a parsed line into a request, a notification
// or a response, and building replies. Shared by the MCP server and the in-sandbox
// agent, so it knows nothing about MCP.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>

namespace agentbox::rpc {

using json = nlohmann::json;

// Error codes from the JSON-RPC 2.0 specification. The enum is int-backed, so
// a protocol built on JSON-RPC adds its own codes as further values of it
// (MCP's are in server/protocol.h; the agent's in its method table).
enum class ErrorCode : int {
  ParseError = -32700,
  InvalidRequest = -32600,
  MethodNotFound = -32601,
  InvalidParams = -32602,
  InternalError = -32603,
};

struct Error {
  ErrorCode code = ErrorCode::InternalError;
  std::string message;
  json data;  // null when absent

  json to_json() const;
};

struct Request {
  json id;  // string or integer
  std::string method;
  json params;  // object, array or null
};

struct Notification {
  std::string method;
  json params;
};

struct Response {
  json id;
  std::optional<json> result;  // set unless error
  std::optional<Error> error;
};

using Message = std::variant<Request, Notification, Response>;

// A message that could not be classified, with the id to answer it with (null
// when none could be read).
struct Invalid {
  json id;
  Error error;
};

// Parses one framed line. A parse failure gives ParseError with id null; a
// well-formed JSON value that is not a JSON-RPC message gives InvalidRequest,
// with the message's id when it had a usable one. Batches (arrays) are refused
// with InvalidRequest: MCP removed them in 2025-06-18.
std::variant<Message, Invalid> parse_message(std::string_view line);

// Classifies an already parsed value (see parse_message). Taken by value so a
// caller that moves it in gets params and result without a copy.
std::variant<Message, Invalid> classify(json value);

json make_request(const json& id, std::string_view method, const json& params);
json make_notification(std::string_view method, const json& params);
json make_result(const json& id, json result);
json make_error(const json& id, const Error& error);

// Serialises for the wire: one line, no embedded newlines (JSON escapes them),
// invalid UTF-8 replaced rather than throwing.
std::string serialize(const json& message);

}  // namespace agentbox::rpc
