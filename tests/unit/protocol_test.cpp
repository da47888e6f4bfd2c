// server/protocol: parameter parsing that names the offending field, request
// _meta, log levels and the protocol version lists.
#include "server/protocol.h"

#include <catch2/catch.hpp>
#include <spdlog/common.h>

using agentbox::rpc::ErrorCode;
using agentbox::server::ParamReader;
using agentbox::server::ProtocolError;
using json = nlohmann::json;
namespace server = agentbox::server;

namespace {

// Runs fn, which must throw ProtocolError, and returns the error it carried.
template <typename Fn>
agentbox::rpc::Error protocol_error(Fn&& fn) {
  try {
    fn();
  } catch (const ProtocolError& e) {
    return e.error();
  }
  FAIL("expected a ProtocolError");
  return {};
}

}  // namespace

TEST_CASE("ParamReader reads present fields and treats null as absent", "[protocol]") {
  json params = {{"name", "x"}, {"opt", nullptr}, {"obj", {{"a", 1}}}};
  ParamReader reader(params, "params");
  CHECK(reader.required_string("name") == "x");
  CHECK(reader.optional_string("name") == "x");
  CHECK_FALSE(reader.optional_string("opt"));
  CHECK_FALSE(reader.optional_string("absent"));
  CHECK_FALSE(reader.has("opt"));
  CHECK(reader.has("obj"));
  CHECK(reader.get("absent").is_null());
  CHECK(reader.optional_object("obj") == json{{"a", 1}});
  CHECK(reader.optional_object("absent") == json::object());
}

TEST_CASE("ParamReader accepts null params as an empty object", "[protocol]") {
  json params;
  ParamReader reader(params, "params");
  CHECK_FALSE(reader.has("x"));
  auto error = protocol_error([&] { reader.required_string("x"); });
  CHECK(error.message == "params.x: is required");
}

TEST_CASE("ParamReader errors are invalid params naming the field", "[protocol]") {
  json params = {{"name", 5}, {"obj", "text"}};
  ParamReader reader(params, "params.inner");

  auto missing = protocol_error([&] { reader.required_string("absent"); });
  CHECK(missing.code == ErrorCode::InvalidParams);
  CHECK(missing.message == "params.inner.absent: is required");
  CHECK(missing.data == json{{"field", "params.inner.absent"}});

  auto wrong_type = protocol_error([&] { reader.required_string("name"); });
  CHECK(wrong_type.code == ErrorCode::InvalidParams);
  CHECK(wrong_type.message == "params.inner.name: must be a string");
  CHECK(wrong_type.data["field"] == "params.inner.name");

  auto optional_wrong = protocol_error([&] { reader.optional_string("name"); });
  CHECK(optional_wrong.message == "params.inner.name: must be a string");

  auto not_object = protocol_error([&] { reader.optional_object("obj"); });
  CHECK(not_object.message == "params.inner.obj: must be an object");

  auto custom = protocol_error([&] { reader.fail("level", "unknown level"); });
  CHECK(custom.message == "params.inner.level: unknown level");
}

TEST_CASE("ParamReader refuses params that are not an object", "[protocol]") {
  for (const json& params : {json::array({1}), json("s"), json(3)}) {
    INFO(params.dump());
    auto error = protocol_error([&] { ParamReader reader(params, "params"); });
    CHECK(error.code == ErrorCode::InvalidParams);
    CHECK(error.message == "params: must be an object");
  }
}

TEST_CASE("initialize params parse, with optional capabilities and clientInfo", "[protocol]") {
  auto full = server::parse_initialize_params(
      {{"protocolVersion", "2025-06-18"},
       {"capabilities", {{"roots", json::object()}}},
       {"clientInfo", {{"name", "claude"}, {"version", "1.2"}}}});
  CHECK(full.protocol_version == "2025-06-18");
  CHECK(full.capabilities == json{{"roots", json::object()}});
  CHECK(full.client_info.name == "claude");
  CHECK(full.client_info.version == "1.2");

  auto bare = server::parse_initialize_params({{"protocolVersion", "x"}});
  CHECK(bare.capabilities == json::object());
  CHECK(bare.client_info.name.empty());
}

TEST_CASE("initialize params errors name the field", "[protocol]") {
  CHECK(protocol_error([] { server::parse_initialize_params(json::object()); }).message ==
        "params.protocolVersion: is required");
  CHECK(protocol_error([] { server::parse_initialize_params({{"protocolVersion", 1}}); }).message ==
        "params.protocolVersion: must be a string");
  CHECK(protocol_error([] {
          server::parse_initialize_params({{"protocolVersion", "v"}, {"clientInfo", {{"name", 3}}}});
        }).message == "params.clientInfo.name: must be a string");
  CHECK(protocol_error([] {
          server::parse_initialize_params({{"protocolVersion", "v"}, {"capabilities", json::array()}});
        }).message == "params.capabilities: must be an object");
}

TEST_CASE("tools/call params parse and name the bad field", "[protocol]") {
  auto call = server::parse_call_tool_params({{"name", "exec"}, {"arguments", {{"command", "ls"}}}});
  CHECK(call.name == "exec");
  CHECK(call.arguments == json{{"command", "ls"}});
  CHECK(server::parse_call_tool_params({{"name", "exec"}}).arguments == json::object());

  CHECK(protocol_error([] { server::parse_call_tool_params(json::object()); }).message == "params.name: is required");
  auto bad_arguments = protocol_error([] { server::parse_call_tool_params({{"name", "x"}, {"arguments", "ls"}}); });
  CHECK(bad_arguments.message == "params.arguments: must be an object");
  CHECK(bad_arguments.data["field"] == "params.arguments");
}

TEST_CASE("request meta: absent, progress tokens, version and capabilities", "[protocol]") {
  SECTION("no params or no _meta") {
    CHECK_FALSE(server::parse_request_meta(nullptr).progress_token);
    CHECK_FALSE(server::parse_request_meta(json::array()).protocol_version);
    auto meta = server::parse_request_meta({{"x", 1}});
    CHECK(meta.raw == json::object());
    CHECK_FALSE(meta.progress_token);
  }
  SECTION("string and integer progress tokens") {
    CHECK(server::parse_request_meta({{"_meta", {{"progressToken", "tok"}}}}).progress_token == json("tok"));
    CHECK(server::parse_request_meta({{"_meta", {{"progressToken", 42}}}}).progress_token == json(42));
  }
  SECTION("progress tokens of other types are refused") {
    for (const json& token : {json(1.5), json(true), json(nullptr), json::object(), json::array()}) {
      INFO(token.dump());
      auto error = protocol_error([&] { server::parse_request_meta({{"_meta", {{"progressToken", token}}}}); });
      CHECK(error.code == ErrorCode::InvalidParams);
      CHECK(error.data["field"] == "params._meta.progressToken");
    }
  }
  SECTION("protocol version and client capabilities") {
    auto meta = server::parse_request_meta(
        {{"_meta",
          {{std::string(server::kMetaProtocolVersion), "2026-07-28"},
           {std::string(server::kMetaClientCapabilities), {{"sampling", json::object()}}},
           {"other", 1}}}});
    CHECK(meta.protocol_version == "2026-07-28");
    CHECK(meta.client_capabilities == json{{"sampling", json::object()}});
    CHECK(meta.raw["other"] == 1);
  }
  SECTION("a protocol version that is not a string is refused, naming the field") {
    auto error = protocol_error(
        [] { server::parse_request_meta({{"_meta", {{std::string(server::kMetaProtocolVersion), 20260728}}}}); });
    CHECK(error.code == ErrorCode::InvalidParams);
    CHECK_THAT(error.message, Catch::Contains("protocolVersion"));
    CHECK_THAT(error.data["field"].get<std::string>(), Catch::Contains("protocolVersion"));
  }
  SECTION("_meta that is not an object is refused") {
    for (const json& raw : {json("x"), json(1), json::array(), json(nullptr)}) {
      INFO(raw.dump());
      auto error = protocol_error([&] { server::parse_request_meta({{"_meta", raw}}); });
      CHECK(error.code == ErrorCode::InvalidParams);
      CHECK(error.message == "params._meta: must be an object");
      CHECK(error.data == json{{"field", "params._meta"}});
    }
  }
}

TEST_CASE("log levels map RFC 5424 names onto spdlog and back", "[protocol]") {
  CHECK(server::parse_log_level("debug") == spdlog::level::debug);
  CHECK(server::parse_log_level("notice") == spdlog::level::info);
  CHECK(server::parse_log_level("warning") == spdlog::level::warn);
  CHECK(server::parse_log_level("emergency") == spdlog::level::critical);
  CHECK_FALSE(server::parse_log_level("warn"));
  CHECK_FALSE(server::parse_log_level("DEBUG"));
  CHECK_FALSE(server::parse_log_level(""));

  CHECK(server::log_level_name(spdlog::level::trace) == "debug");
  CHECK(server::log_level_name(spdlog::level::warn) == "warning");
  CHECK(server::log_level_name(spdlog::level::err) == "error");
  CHECK(server::log_level_name(spdlog::level::critical) == "critical");
  for (auto name : {"debug", "info", "warning", "error", "critical"})
    CHECK(server::log_level_name(*server::parse_log_level(name)) == name);
}

TEST_CASE("version lists: initialize versions, modern versions, newest first", "[protocol]") {
  CHECK(server::is_supported_initialize_version("2025-11-25"));
  CHECK(server::is_supported_initialize_version("2025-03-26"));
  CHECK_FALSE(server::is_supported_initialize_version("2024-11-05"));
  CHECK_FALSE(server::is_supported_initialize_version("2026-07-28"));
  CHECK(server::is_supported_modern_version("2026-07-28"));
  CHECK_FALSE(server::is_supported_modern_version("2025-11-25"));
  CHECK(server::supported_versions_json() == json::array({"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"}));
}
