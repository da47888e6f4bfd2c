// rpc/message: classifying lines into requests, notifications and responses,
// every way a line can fail to be one, and the builders round-tripping through
// the classifier. rpc/json_text: the fast writer and reader against
// nlohmann's dump and parse.
#include "rpc/message.h"

#include "rpc/json_text.h"

#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <vector>

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

namespace {

// What serialize() must produce, byte for byte: nlohmann's own dump with
// invalid UTF-8 replaced (the format before the fast writer existed).
std::string reference(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// Strings built to hit every branch of the escaper: plain runs longer and
// shorter than a word, each escape, control bytes, DEL, and UTF-8 sequences
// of every length next to word boundaries.
std::string random_text(std::mt19937& rng, bool valid_utf8) {
  static const std::vector<std::string> pieces = {
      "a", "plain text ", std::string(17, 'x'), "\"", "\\", "/", "\b", "\f", "\n", "\r", "\t", std::string(1, '\0'),
      "\x01", "\x1f", "\x7f", " ", "é", "€", "😀", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf",
      "\xee\x80\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"};
  static const std::vector<std::string> invalid = {
      "\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc2", "\xe0\x80\x80", "\xe0\xa0", "\xed\xa0\x80", "\xf0\x80\x80\x80",
      "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe", "\xf0\x90\x80", "\xe2\x82"};
  std::string s;
  std::size_t count = rng() % 12;
  for (std::size_t i = 0; i < count; ++i) {
    if (!valid_utf8 && rng() % 4 == 0) s += invalid[rng() % invalid.size()];
    else s += pieces[rng() % pieces.size()];
  }
  return s;
}

json random_value(std::mt19937& rng, bool valid_utf8, int depth) {
  switch (rng() % (depth > 3 ? 6 : 8)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<std::int64_t>(rng()) - (std::int64_t{1} << 31) * static_cast<std::int64_t>(rng() % 3);
    case 3: return std::numeric_limits<std::uint64_t>::max() - rng() % 5;
    case 4: return static_cast<double>(rng()) / 7.0;
    case 5: return random_text(rng, valid_utf8);
    case 6: {
      json array = json::array();
      for (std::size_t i = rng() % 5; i > 0; --i) array.push_back(random_value(rng, valid_utf8, depth + 1));
      return array;
    }
    default: {
      json object = json::object();
      for (std::size_t i = rng() % 5; i > 0; --i) object[random_text(rng, valid_utf8)] = random_value(rng, valid_utf8, depth + 1);
      return object;
    }
  }
}

}  // namespace

TEST_CASE("serialize matches nlohmann's dump byte for byte", "[rpc][message]") {
  SECTION("escapes, controls and scalars") {
    for (const json& value : {json("\"\\/\b\f\n\r\t"), json(std::string("\0\x01\x1f\x20\x7f", 5)), json(""),
                              json::object(), json::array(), json(-0.0), json(1e300), json(0.1),
                              json(std::numeric_limits<std::int64_t>::min()), json(std::uint64_t{18446744073709551615u}),
                              json{{"a", {1, 2.5, nullptr, true, false, "x"}}, {"b", json::object()}}})
      CHECK(rpc::serialize(value) == reference(value));
  }
  SECTION("every single byte and every pair of bytes after a plain run") {
    for (int a = 0; a < 256; ++a) {
      std::string one(1, static_cast<char>(a));
      CHECK(rpc::serialize(json(one)) == reference(json(one)));
      for (int b = 0; b < 256; ++b) {
        std::string s = "0123456789" + one + static_cast<char>(b);
        REQUIRE(rpc::serialize(json(s)) == reference(json(s)));
      }
    }
  }
  SECTION("randomized values, valid UTF-8") {
    std::mt19937 rng(20261129);
    for (int i = 0; i < 3000; ++i) {
      json value = random_value(rng, true, 0);
      REQUIRE(rpc::serialize(value) == reference(value));
    }
  }
  SECTION("randomized values with invalid sequences are replaced as dump(replace) does") {
    std::mt19937 rng(7);
    for (int i = 0; i < 3000; ++i) {
      json value = random_value(rng, false, 0);
      REQUIRE(rpc::serialize(value) == reference(value));
    }
  }
  SECTION("a megabyte page") {
    std::string page;
    while (page.size() < (1 << 20)) page += "line \"quoted\"\tand é€😀 text\n";
    json value = {{"content", page}, {"size", page.size()}};
    CHECK(rpc::serialize(value) == reference(value));
  }
}

namespace {

// Same value and the same number types (== treats 1u and 1 as equal).
bool identical(const json& a, const json& b) {
  if (a.type() != b.type() || a != b) return false;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      if (!identical(it.value(), b.at(it.key()))) return false;
  } else if (a.is_array()) {
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!identical(a[i], b[i])) return false;
  }
  return true;
}

// read_json must agree with json::parse wherever it answers.
void check_read(const std::string& text) {
  json expected = json::parse(text, nullptr, false);
  auto fast = rpc::read_json(text);
  if (!fast) return;
  INFO(text);
  REQUIRE_FALSE(expected.is_discarded());
  REQUIRE(identical(*fast, expected));
}

}  // namespace

TEST_CASE("read_json gives json::parse's value or leaves the text to it", "[rpc][message]") {
  SECTION("the subset it reads") {
    for (std::string text : std::vector<std::string>{"{}", "[]", " {\"a\" : [1, -2, 0, -0, true, false, null, \"x\"]}\n", "\"\\u00e9\\ud83d\\ude00\\/\"",
                             "18446744073709551615", "-9223372036854775808", "{\"a\":1,\"a\":2}", "\"\\u0000\""}) {
      INFO(text);
      auto fast = rpc::read_json(text);
      REQUIRE(fast);
      CHECK(identical(*fast, json::parse(text)));
    }
  }
  SECTION("what it hands back") {
    for (std::string text : std::vector<std::string>{"", "{", "[1,]", "{\"a\":1,}", "01", "1.5", "1e3", "18446744073709551616",
                             "-9223372036854775809", "\"\\ud800\"", "\"\\udc00\"", "\"\\x\"", "\"a\nb\"", "\"\xff\"",
                             "\"\xed\xa0\x80\"", "nul", "[1] x", std::string(100, '[') + std::string(100, ']')})
      CHECK_FALSE(rpc::read_json(text));
  }
  SECTION("randomized values, their text and mutations of it") {
    std::mt19937 rng(42);
    for (int i = 0; i < 3000; ++i) {
      std::string text = random_value(rng, true, 0).dump();
      check_read(text);
      for (int m = 0; m < 4 && !text.empty(); ++m) {
        std::string mutated = text;
        std::size_t at = rng() % mutated.size();
        static const char kBytes[] = "{}[],:\"\\u0-1e. \xff\xc3\x80";
        if (rng() % 2) mutated[at] = kBytes[rng() % (sizeof kBytes - 1)];
        else mutated.erase(at, 1);
        check_read(mutated);
      }
    }
  }
}
