// rpc/message: classifying lines into requests, notifications and responses,
// every way a line can fail to be one, and the builders round-tripping through
// the classifier.
#include "rpc/message.h"

#include <catch2/catch.hpp>

using agentbox::rpc::ErrorCode;
using agentbox::rpc::Invalid;
using agentbox::rpc::Message;
using agentbox::rpc::Notification;
using agentbox::rpc::Request;
using agentbox::rpc::Response;
using json = nlohmann::json;
namespace rpc = agentbox::rpc;

namespace {

Message parse_ok(std::string_view line) {
  auto parsed = rpc::parse_message(line);
  auto* bad = std::get_if<Invalid>(&parsed);
  INFO((bad ? bad->error.message : std::string()));
  REQUIRE_FALSE(bad);
  return std::get<Message>(parsed);
}

Invalid parse_bad(std::string_view line) {
  auto parsed = rpc::parse_message(line);
  INFO("expected an invalid message: " << line);
  REQUIRE(std::holds_alternative<Invalid>(parsed));
  return std::get<Invalid>(parsed);
}

}  // namespace

TEST_CASE("a request keeps its id, method and params", "[rpc][message]") {
  auto message = parse_ok(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"x"}})");
  auto* request = std::get_if<Request>(&message);
  REQUIRE(request);
  CHECK(request->id == 7);
  CHECK(request->method == "tools/list");
  CHECK(request->params == json{{"cursor", "x"}});
}

TEST_CASE("string ids and array params are accepted, absent params are null", "[rpc][message]") {
  auto message = parse_ok(R"({"jsonrpc":"2.0","id":"abc","method":"m","params":[1,2]})");
  REQUIRE(std::holds_alternative<Request>(message));
  CHECK(std::get<Request>(message).id == "abc");
  CHECK(std::get<Request>(message).params == json::array({1, 2}));

  auto bare = parse_ok(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
  CHECK(std::get<Request>(bare).params.is_null());
}

TEST_CASE("a message without an id is a notification", "[rpc][message]") {
  auto message = parse_ok(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  auto* note = std::get_if<Notification>(&message);
  REQUIRE(note);
  CHECK(note->method == "notifications/initialized");
  CHECK(note->params.is_null());
}

TEST_CASE("a response carries either a result or an error", "[rpc][message]") {
  auto ok = parse_ok(R"({"jsonrpc":"2.0","id":3,"result":{"x":1}})");
  auto* result = std::get_if<Response>(&ok);
  REQUIRE(result);
  CHECK(result->id == 3);
  REQUIRE(result->result);
  CHECK(*result->result == json{{"x", 1}});
  CHECK_FALSE(result->error);

  auto failed = parse_ok(R"({"jsonrpc":"2.0","id":"q","error":{"code":-32601,"message":"nope","data":{"k":2}}})");
  auto* error = std::get_if<Response>(&failed);
  REQUIRE(error);
  CHECK_FALSE(error->result);
  REQUIRE(error->error);
  CHECK(error->error->code == ErrorCode::MethodNotFound);
  CHECK(error->error->message == "nope");
  CHECK(error->error->data == json{{"k", 2}});
}

TEST_CASE("a null result is still a result", "[rpc][message]") {
  auto message = parse_ok(R"({"jsonrpc":"2.0","id":1,"result":null})");
  auto& response = std::get<Response>(message);
  REQUIRE(response.result);
  CHECK(response.result->is_null());
}

TEST_CASE("a line that is not JSON is a parse error with id null", "[rpc][message]") {
  for (std::string_view line : {"{", "not json", R"({"jsonrpc":"2.0","id":1,)", ""}) {
    INFO(line);
    auto bad = parse_bad(line);
    CHECK(bad.error.code == ErrorCode::ParseError);
    CHECK(bad.id.is_null());
  }
}

TEST_CASE("batches are refused as invalid requests", "[rpc][message]") {
  auto bad = parse_bad(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  CHECK(bad.error.code == ErrorCode::InvalidRequest);
  CHECK(bad.id.is_null());
  CHECK_THAT(bad.error.message, Catch::Contains("batch"));
}

TEST_CASE("JSON values that are not objects are invalid requests", "[rpc][message]") {
  for (std::string_view line : {"1", "\"x\"", "null", "true"}) {
    INFO(line);
    auto bad = parse_bad(line);
    CHECK(bad.error.code == ErrorCode::InvalidRequest);
    CHECK(bad.id.is_null());
  }
}

TEST_CASE("jsonrpc must be present and exactly \"2.0\"", "[rpc][message]") {
  auto missing = parse_bad(R"({"id":4,"method":"ping"})");
  CHECK(missing.error.code == ErrorCode::InvalidRequest);
  CHECK(missing.id == 4);  // answered with the id it had

  auto wrong = parse_bad(R"({"jsonrpc":"1.0","id":"a","method":"ping"})");
  CHECK(wrong.error.code == ErrorCode::InvalidRequest);
  CHECK(wrong.id == "a");

  auto number = parse_bad(R"({"jsonrpc":2.0,"id":5,"method":"ping"})");
  CHECK(number.error.code == ErrorCode::InvalidRequest);
}

TEST_CASE("ids that are not strings or integers are refused and not echoed", "[rpc][message]") {
  for (std::string_view id : {"null", "1.5", "true", "[1]", "{\"a\":1}"}) {
    INFO(id);
    auto bad = parse_bad(R"({"jsonrpc":"2.0","method":"ping","id":)" + std::string(id) + "}");
    CHECK(bad.error.code == ErrorCode::InvalidRequest);
    CHECK(bad.id.is_null());
  }
}

TEST_CASE("method must be a string", "[rpc][message]") {
  auto bad = parse_bad(R"({"jsonrpc":"2.0","id":9,"method":42})");
  CHECK(bad.error.code == ErrorCode::InvalidRequest);
  CHECK(bad.id == 9);
  CHECK_THAT(bad.error.message, Catch::Contains("method"));
}

TEST_CASE("params must be an object or an array", "[rpc][message]") {
  for (std::string_view params : {"1", "\"s\"", "true"}) {
    INFO(params);
    auto bad = parse_bad(R"({"jsonrpc":"2.0","id":2,"method":"m","params":)" + std::string(params) + "}");
    CHECK(bad.error.code == ErrorCode::InvalidRequest);
    CHECK(bad.id == 2);
    CHECK_THAT(bad.error.message, Catch::Contains("params"));
  }
  auto note = parse_bad(R"({"jsonrpc":"2.0","method":"m","params":3})");
  CHECK(note.error.code == ErrorCode::InvalidRequest);
  CHECK(note.id.is_null());
}

TEST_CASE("a response needs an id", "[rpc][message]") {
  auto bad = parse_bad(R"({"jsonrpc":"2.0","result":{}})");
  CHECK(bad.error.code == ErrorCode::InvalidRequest);
  CHECK(bad.id.is_null());
}

TEST_CASE("a response with a malformed error object is invalid", "[rpc][message]") {
  for (std::string_view error : {R"("boom")", R"({"message":"no code"})", R"({"code":"1","message":"x"})",
                                 R"({"code":-1})", R"({"code":-1,"message":7})", R"({"code":1.5,"message":"x"})"}) {
    INFO(error);
    auto bad = parse_bad(R"({"jsonrpc":"2.0","id":11,"error":)" + std::string(error) + "}");
    CHECK(bad.error.code == ErrorCode::InvalidRequest);
    CHECK(bad.id == 11);
  }
}

TEST_CASE("an object with neither method, result nor error is invalid", "[rpc][message]") {
  auto bad = parse_bad(R"({"jsonrpc":"2.0","id":"z"})");
  CHECK(bad.error.code == ErrorCode::InvalidRequest);
  CHECK(bad.id == "z");
}

TEST_CASE("builders round-trip through the classifier", "[rpc][message]") {
  SECTION("request") {
    auto message = parse_ok(rpc::serialize(rpc::make_request(5, "tools/call", json{{"name", "x"}})));
    auto& request = std::get<Request>(message);
    CHECK(request.id == 5);
    CHECK(request.method == "tools/call");
    CHECK(request.params == json{{"name", "x"}});
  }
  SECTION("request without params leaves params out") {
    json wire = rpc::make_request("r", "ping", nullptr);
    CHECK_FALSE(wire.contains("params"));
    CHECK(std::get<Request>(parse_ok(rpc::serialize(wire))).method == "ping");
  }
  SECTION("notification") {
    json wire = rpc::make_notification("notifications/progress", json{{"progress", 1}});
    CHECK_FALSE(wire.contains("id"));
    auto note = std::get<Notification>(std::get<Message>(rpc::classify(wire)));
    CHECK(note.method == "notifications/progress");
    CHECK(note.params == json{{"progress", 1}});
  }
  SECTION("result") {
    auto response = std::get<Response>(std::get<Message>(rpc::classify(rpc::make_result("id", json{{"a", 1}}))));
    CHECK(response.id == "id");
    CHECK(*response.result == json{{"a", 1}});
  }
  SECTION("error without data has no data key") {
    rpc::Error error{ErrorCode::InvalidParams, "bad", nullptr};
    json wire = rpc::make_error(1, error);
    CHECK(wire["error"] == json{{"code", -32602}, {"message", "bad"}});
    auto response = std::get<Response>(std::get<Message>(rpc::classify(wire)));
    CHECK(response.error->code == ErrorCode::InvalidParams);
    CHECK(response.error->data.is_null());
  }
  SECTION("error with data and a null id") {
    json wire = rpc::make_error(nullptr, {ErrorCode::ParseError, "p", json{{"line", 3}}});
    CHECK(wire["id"].is_null());
    CHECK(wire["error"]["data"] == json{{"line", 3}});
  }
}

TEST_CASE("serialize writes one line and survives invalid UTF-8", "[rpc][message]") {
  json message = rpc::make_notification("m", json{{"text", "a\nb"}, {"bad", std::string("\xff\xfe")}});
  std::string line;
  REQUIRE_NOTHROW(line = rpc::serialize(message));
  CHECK(line.find('\n') == std::string::npos);
  auto note = std::get<Notification>(parse_ok(line));
  CHECK(note.params["text"] == "a\nb");
}
