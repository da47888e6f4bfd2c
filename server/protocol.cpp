#include "server/protocol.h"

#include <spdlog/common.h>

#include <algorithm>

namespace agentbox::server {

ParamReader::ParamReader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
  if (!object_.is_object() && !object_.is_null())
    throw ProtocolError(rpc::ErrorCode::InvalidParams, path_ + ": must be an object");
}

void ParamReader::fail(std::string_view key, std::string_view problem) const {
  throw ProtocolError(rpc::ErrorCode::InvalidParams, path_ + "." + std::string(key) + ": " + std::string(problem),
                      json{{"field", path_ + "." + std::string(key)}});
}

bool ParamReader::has(std::string_view key) const {
  return object_.is_object() && object_.contains(key) && !object_[std::string(key)].is_null();
}

const json& ParamReader::get(std::string_view key) const {
  static const json null_value;
  if (!has(key)) return null_value;
  return object_[std::string(key)];
}

std::string ParamReader::required_string(std::string_view key) const {
  if (!has(key)) fail(key, "is required");
  const json& v = get(key);
  if (!v.is_string()) fail(key, "must be a string");
  return v.get<std::string>();
}

std::optional<std::string> ParamReader::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const json& v = get(key);
  if (!v.is_string()) fail(key, "must be a string");
  return v.get<std::string>();
}

json ParamReader::optional_object(std::string_view key) const {
  if (!has(key)) return json::object();
  const json& v = get(key);
  if (!v.is_object()) fail(key, "must be an object");
  return v;
}

InitializeParams parse_initialize_params(const json& params) {
  ParamReader reader(params, "params");
  InitializeParams out;
  out.protocol_version = reader.required_string("protocolVersion");
  out.capabilities = reader.optional_object("capabilities");
  json info = reader.optional_object("clientInfo");
  ParamReader client(info, "params.clientInfo");
  out.client_info.name = client.optional_string("name").value_or("");
  out.client_info.version = client.optional_string("version").value_or("");
  return out;
}

CallToolParams parse_call_tool_params(const json& params) {
  ParamReader reader(params, "params");
  CallToolParams out;
  out.name = reader.required_string("name");
  out.arguments = reader.optional_object("arguments");
  return out;
}

namespace {
struct LevelName {
  std::string_view name;
  int level;
};
// RFC 5424 has eight levels, spdlog six: notice folds into info, alert and
// emergency into critical.
constexpr LevelName kLevels[] = {
    {"debug", spdlog::level::debug},       {"info", spdlog::level::info},
    {"notice", spdlog::level::info},       {"warning", spdlog::level::warn},
    {"error", spdlog::level::err},         {"critical", spdlog::level::critical},
    {"alert", spdlog::level::critical},    {"emergency", spdlog::level::critical},
};
}  // namespace

std::optional<int> parse_log_level(std::string_view name) {
  for (const auto& l : kLevels)
    if (l.name == name) return l.level;
  return std::nullopt;
}

std::string_view log_level_name(int level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warning";
    case spdlog::level::err: return "error";
    default: return "critical";
  }
}

RequestMeta parse_request_meta(const json& params) {
  RequestMeta meta;
  if (!params.is_object() || !params.contains("_meta")) return meta;
  const json& raw = params["_meta"];
  if (!raw.is_object())
    throw ProtocolError(rpc::ErrorCode::InvalidParams, "params._meta: must be an object",
                        json{{"field", "params._meta"}});
  meta.raw = raw;
  if (raw.contains("progressToken")) {
    const json& token = raw["progressToken"];
    if (!token.is_string() && !token.is_number_integer())
      throw ProtocolError(rpc::ErrorCode::InvalidParams,
                          "params._meta.progressToken: must be a string or an integer",
                          json{{"field", "params._meta.progressToken"}});
    meta.progress_token = token;
  }
  auto version = raw.find(std::string(kMetaProtocolVersion));
  if (version != raw.end()) {
    if (!version->is_string())
      throw ProtocolError(rpc::ErrorCode::InvalidParams,
                          "params._meta[\"io.modelcontextprotocol/protocolVersion\"]: must be a string",
                          json{{"field", "params._meta[\"io.modelcontextprotocol/protocolVersion\"]"}});
    meta.protocol_version = version->get<std::string>();
  }
  auto caps = raw.find(std::string(kMetaClientCapabilities));
  if (caps != raw.end() && caps->is_object()) meta.client_capabilities = *caps;
  return meta;
}

bool is_supported_initialize_version(std::string_view version) {
  return std::find(kInitializeVersions.begin(), kInitializeVersions.end(), version) != kInitializeVersions.end();
}

bool is_supported_modern_version(std::string_view version) {
  return std::find(kModernVersions.begin(), kModernVersions.end(), version) != kModernVersions.end();
}

json supported_versions_json() {
  json out = json::array();
  for (auto v : kModernVersions) out.push_back(v);
  for (auto v : kInitializeVersions) out.push_back(v);
  return out;
}

bool declares_tasks_extension(const RequestMeta& meta) {
  const json& caps = meta.client_capabilities;
  return caps.contains("extensions") && caps["extensions"].is_object() &&
         caps["extensions"].contains(std::string(kTasksExtension));
}

ProtocolError missing_tasks_extension(const std::string& what) {
  return ProtocolError(static_cast<rpc::ErrorCode>(-32021),
                       "Missing required client capability: " + what + " needs the " + std::string(kTasksExtension) +
                           " extension in the request's capabilities",
                       json{{"requiredCapabilities", {{"extensions", {{std::string(kTasksExtension), json::object()}}}}}});
}

}  // namespace agentbox::server
