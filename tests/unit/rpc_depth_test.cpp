// rpc/json_parse: json::parse's value with nesting limited to 256 levels,
// and parse_message's answer to a line nested deeper (docs/protocol.md,
// "Nesting depth").
#include "rpc/json_parse.h"
#include "rpc/message.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <string>

using json = nlohmann::json;
namespace rpc = agentbox::rpc;
using Failure = rpc::ParsedJson::Failure;

namespace {

std::string arrays(std::size_t levels, const std::string& inside = "") {
  return std::string(levels, '[') + inside + std::string(levels, ']');
}

// A random value nested up to max_depth levels, with what the fast reader
// hands over to nlohmann: floats, escapes, repeated keys.
json random_value(std::mt19937& rng, int max_depth) {
  int kind = static_cast<int>(rng() % (max_depth > 0 ? 8 : 5));
  switch (kind) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<std::int64_t>(rng()) - (1LL << 31);
    case 3: return static_cast<double>(rng() % 1000) / 8.0;
    case 4: return std::string("s\"\\\n") + std::to_string(rng() % 100);
    case 5:
    case 6: {
      json a = json::array();
      for (unsigned i = rng() % 3; i-- > 0;) a.push_back(random_value(rng, max_depth - 1));
      a.push_back(random_value(rng, max_depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      for (unsigned i = rng() % 3 + 1; i-- > 0;) o["k" + std::to_string(rng() % 4)] = random_value(rng, max_depth - 1);
      return o;
    }
  }
}

}  // namespace

TEST_CASE("parse_json gives json::parse's value below the limit", "[rpc][depth]") {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string text = random_value(rng, 6).dump();
    auto parsed = rpc::parse_json(text);
    INFO(text);
    REQUIRE(parsed.ok());
    CHECK(parsed.value == json::parse(text));
  }
  // Deeper than the fast reader goes (64), so nlohmann's parser with the
  // limit builds it; a repeated key keeps the last value, as json::parse does.
  for (std::size_t depth : {65, 100, 255, 256}) {
    std::string text = arrays(depth - 2, R"({"a":1,"b":[1.5,"x"],"a":2})");  // 2: the object and its array
    auto parsed = rpc::parse_json(text);
    INFO(depth);
    REQUIRE(parsed.ok());
    CHECK(parsed.value == json::parse(text));
  }
  CHECK(rpc::parse_json("[1,2").failure == Failure::NotJson);
  CHECK(rpc::parse_json("{} trailing").failure == Failure::NotJson);
  CHECK(rpc::parse_json("").failure == Failure::NotJson);
  CHECK(rpc::parse_json("1e999").failure == Failure::NotJson);
}

TEST_CASE("nesting past 256 levels is refused, however deep, without recursion", "[rpc][depth]") {
  auto at_limit = rpc::parse_json(arrays(256));
  CHECK(at_limit.ok());
  auto over = rpc::parse_json(arrays(257));
  CHECK(over.failure == Failure::TooDeep);
  CHECK(over.depth == 257);
  std::string objects;
  for (int i = 0; i < 300; ++i) objects += R"({"a":)";
  objects += "1" + std::string(300, '}');
  CHECK(rpc::parse_json(objects).failure == Failure::TooDeep);
  // A million levels (2 MB): refused at once; the text after the limit is
  // only scanned for its depth.
  auto start = std::chrono::steady_clock::now();
  auto million = rpc::parse_json(arrays(1'000'000));
  CHECK(million.failure == Failure::TooDeep);
  CHECK(million.depth == 1'000'000);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  // Brackets in strings do not count; escaped quotes do not end a string.
  CHECK(rpc::nesting_depth(R"(["[[[\"[[[", {"a":"}}}{{{"}])") == 2);
}

TEST_CASE("a message nested too deep is an invalid request naming depth and limit", "[rpc][depth]") {
  std::string line = R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":)" + arrays(70000) + "}}";
  auto parsed = rpc::parse_message(line);
  auto* bad = std::get_if<rpc::Invalid>(&parsed);
  REQUIRE(bad);
  CHECK(bad->error.code == rpc::ErrorCode::InvalidRequest);
  CHECK(bad->error.data == json{{"depth", 70002}, {"limit", 256}});
  CHECK(bad->error.message == "the message nests 70002 levels deep, over the limit of 256");
  CHECK(bad->id == 7);  // read before the deep part
  // The id after the deep part is not read: null.
  std::string late = R"({"jsonrpc":"2.0","method":"ping","params":)" + arrays(300) + R"(,"id":8})";
  auto late_parsed = rpc::parse_message(late);
  auto* late_bad = std::get_if<rpc::Invalid>(&late_parsed);
  REQUIRE(late_bad);
  CHECK(late_bad->id.is_null());
  CHECK(late_bad->error.data["depth"] == 301);
  // The error itself serialises (it holds nothing deep).
  CHECK_FALSE(rpc::serialize(rpc::make_error(bad->id, bad->error)).empty());
}
