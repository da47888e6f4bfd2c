#include "rpc/message.h"

#include "rpc/json_parse.h"
#include "rpc/json_text.h"

namespace agentbox::rpc {

json Error::to_json() const {
  json out = {{"code", static_cast<int>(code)}, {"message", message}};
  if (!data.is_null()) out["data"] = data;
  return out;
}

namespace {

bool valid_id(const json& id) {
  // JSON-RPC allows null ids, MCP does not; fractional numbers are discouraged
  // and no client sends them, so treat them as invalid too.
  return id.is_string() || id.is_number_integer();
}

Invalid invalid(json id, std::string message, json data = nullptr) {
  return Invalid{std::move(id), Error{ErrorCode::InvalidRequest, std::move(message), std::move(data)}};
}

std::optional<Error> parse_error_object(const json& e) {
  if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer() ||
      !e.contains("message") || !e["message"].is_string())
    return std::nullopt;
  Error err;
  err.code = static_cast<ErrorCode>(e["code"].get<int>());
  err.message = e["message"].get<std::string>();
  if (e.contains("data")) err.data = e["data"];
  return err;
}

}  // namespace

std::variant<Message, Invalid> classify(json value) {
  if (value.is_array())
    return invalid(nullptr, "JSON-RPC batches are not supported (removed in MCP 2025-06-18)");
  if (!value.is_object()) return invalid(nullptr, "a JSON-RPC message must be an object");

  json id = value.contains("id") ? value["id"] : json();
  bool has_id = value.contains("id");
  json usable_id = has_id && valid_id(id) ? id : json();

  auto version = value.find("jsonrpc");
  if (version == value.end() || *version != "2.0")
    return invalid(usable_id, "\"jsonrpc\" must be \"2.0\"");

  if (value.contains("method")) {
    const json& method = value["method"];
    if (!method.is_string()) return invalid(usable_id, "\"method\" must be a string");
    json params = value.contains("params") ? std::move(value["params"]) : json();
    if (!params.is_null() && !params.is_object() && !params.is_array())
      return invalid(usable_id, "\"params\" must be an object or an array");
    if (!has_id) return Message{Notification{method.get<std::string>(), std::move(params)}};
    if (!valid_id(id)) return invalid(nullptr, "\"id\" must be a string or an integer");
    return Message{Request{std::move(id), method.get<std::string>(), std::move(params)}};
  }

  if (value.contains("result") || value.contains("error")) {
    if (!has_id) return invalid(nullptr, "a response needs an \"id\"");
    Response response{std::move(id), std::nullopt, std::nullopt};
    if (value.contains("error")) {
      auto err = parse_error_object(value["error"]);
      if (!err) return invalid(usable_id, "malformed \"error\" object in response");
      response.error = std::move(err);
    } else {
      response.result = std::move(value["result"]);
    }
    return Message{std::move(response)};
  }
  return invalid(usable_id, "not a request, notification or response (no \"method\", \"result\" or \"error\")");
}

std::variant<Message, Invalid> parse_message(std::string_view line) {
  ParsedJson parsed = parse_json(line);
  if (parsed.failure == ParsedJson::Failure::NotJson)
    return Invalid{nullptr, Error{ErrorCode::ParseError, "parse error: the line is not valid JSON", nullptr}};
  if (parsed.failure == ParsedJson::Failure::TooDeep) {
    // The id is answered when it came before the deep part (it was read).
    const json& partial = parsed.value;
    json id = partial.is_object() && partial.contains("id") && valid_id(partial["id"]) ? partial["id"] : json();
    return invalid(std::move(id), "the message nests " + std::to_string(parsed.depth) +
                                      " levels deep, over the limit of " + std::to_string(kMaxNestingDepth),
                   json{{"depth", parsed.depth}, {"limit", kMaxNestingDepth}});
  }
  return classify(std::move(parsed.value));
}

json make_request(const json& id, std::string_view method, const json& params) {
  json out = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (!params.is_null()) out["params"] = params;
  return out;
}

json make_notification(std::string_view method, const json& params) {
  json out = {{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.is_null()) out["params"] = params;
  return out;
}

json make_result(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json make_error(const json& id, const Error& error) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", error.to_json()}};
}

std::string serialize(const json& message) { return write_json(message); }

}  // namespace agentbox::rpc
