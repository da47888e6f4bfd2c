// server/transcript: the placeholder matcher the replay runner checks replies
// with, capture substitution, loosening of recordings, and transcript parsing.
#include "server/transcript.h"

#include <catch2/catch.hpp>

#include <stdexcept>

using agentbox::server::TranscriptStep;
using json = nlohmann::json;
namespace server = agentbox::server;

namespace {

using Captures = std::map<std::string, json>;

std::optional<std::string> match(const json& expected, const json& actual) {
  Captures captures;
  return server::match_json(expected, actual, captures);
}

bool matches(const json& expected, const json& actual) { return !match(expected, actual); }

}  // namespace

TEST_CASE("plain values match only themselves", "[transcript]") {
  CHECK(matches(json{{"a", 1}, {"b", {1, "x", nullptr}}}, json{{"a", 1}, {"b", {1, "x", nullptr}}}));
  CHECK_FALSE(matches("x", "y"));
  CHECK_FALSE(matches(true, false));
  CHECK_FALSE(matches(nullptr, 0));
  CHECK_FALSE(matches("1", 1));
}

TEST_CASE("numbers compare by value, 1 matches 1.0", "[transcript]") {
  CHECK(matches(1, 1.0));
  CHECK(matches(2.0, 2));
  CHECK(matches(-3, -3.0));
  CHECK_FALSE(matches(1, 1.5));
  CHECK_FALSE(matches(1, "1"));
}

TEST_CASE("every type placeholder accepts its type and refuses others", "[transcript]") {
  struct Case {
    const char* placeholder;
    json accepted;
    json refused;
  };
  for (const auto& c : {Case{"<<string>>", "s", 1}, Case{"<<number>>", 1.5, "1.5"}, Case{"<<number>>", 3, nullptr},
                        Case{"<<integer>>", 3, 3.5}, Case{"<<bool>>", false, 0}, Case{"<<object>>", json::object(), json::array()},
                        Case{"<<array>>", json::array({1}), json::object()}, Case{"<<null>>", nullptr, false}}) {
    INFO(c.placeholder);
    CHECK(matches(c.placeholder, c.accepted));
    CHECK_FALSE(matches(c.placeholder, c.refused));
  }
  for (const json& anything : {json(1), json("s"), json(nullptr), json::object(), json::array()})
    CHECK(matches("<<any>>", anything));
}

TEST_CASE("iso8601, regex and contains placeholders look inside strings", "[transcript]") {
  CHECK(matches("<<iso8601>>", "2025-11-29T15:52:00Z"));
  CHECK(matches("<<iso8601>>", "2025-11-29T15:52:00.123+01:00"));
  CHECK_FALSE(matches("<<iso8601>>", "2025-11-29 15:52:00"));
  CHECK_FALSE(matches("<<iso8601>>", 20251129));

  CHECK(matches("<<re:^sb-[0-9a-f]+$>>", "sb-12ab"));
  CHECK_FALSE(matches("<<re:^sb-[0-9a-f]+$>>", "sb-XYZ"));
  CHECK(matches("<<re:[0-9]+>>", "took 12 ms"));  // a search, not a full match
  CHECK_FALSE(matches("<<re:.*>>", 5));

  CHECK(matches("<<contains:not found>>", "file not found: /x"));
  CHECK_FALSE(matches("<<contains:not found>>", "found"));
  CHECK_FALSE(matches("<<contains:x>>", json::array({"x"})));
}

TEST_CASE("an unknown placeholder is reported, not matched", "[transcript]") {
  auto diff = match("<<nonsense>>", "x");
  REQUIRE(diff);
  CHECK_THAT(*diff, Catch::Contains("unknown placeholder <<nonsense>>"));

  auto bad_regex = match(json{{"text", "<<re:([a-z>>"}}, json{{"text", "abc"}});
  REQUIRE(bad_regex);
  CHECK_THAT(*bad_regex, Catch::StartsWith("text: bad regular expression in <<re:([a-z>>"));
}

TEST_CASE("strings that merely look like placeholders match literally", "[transcript]") {
  CHECK(matches("<<>", "<<>"));
  CHECK(matches("<<", "<<"));
  CHECK_FALSE(matches("<<a", "b"));
}

TEST_CASE("captures remember a value that later placeholders must equal", "[transcript]") {
  Captures captures;
  CHECK_FALSE(server::match_json(json{{"id", "<<capture:pid>>"}}, json{{"id", 4242}}, captures));
  REQUIRE(captures.count("pid"));
  CHECK(captures["pid"] == 4242);

  CHECK_FALSE(server::match_json(json{{"again", "<<$pid>>"}}, json{{"again", 4242}}, captures));
  auto diff = server::match_json(json{{"again", "<<$pid>>"}}, json{{"again", 4243}}, captures);
  REQUIRE(diff);
  CHECK_THAT(*diff, Catch::Contains("again") && Catch::Contains("captured as pid"));

  auto unknown = server::match_json("<<$nothing>>", 1, captures);
  REQUIRE(unknown);
  CHECK_THAT(*unknown, Catch::Contains("names nothing captured yet"));
}

TEST_CASE("objects must have the same keys unless <<more>> is given", "[transcript]") {
  json actual = {{"a", 1}, {"b", 2}};
  auto extra = match(json{{"a", 1}}, actual);
  REQUIRE(extra);
  CHECK_THAT(*extra, Catch::Contains("b: unexpected key"));

  CHECK(matches(json{{"a", 1}, {"<<more>>", true}}, actual));

  auto missing = match(json{{"a", 1}, {"c", 3}, {"<<more>>", true}}, actual);
  REQUIRE(missing);
  CHECK_THAT(*missing, Catch::Contains("c: missing"));

  CHECK_FALSE(matches(json{{"a", 1}}, json::array({1})));
}

TEST_CASE("arrays must have the same length", "[transcript]") {
  auto shorter = match(json{{"items", {1, 2, 3}}}, json{{"items", {1, 2}}});
  REQUIRE(shorter);
  CHECK_THAT(*shorter, Catch::Contains("items: expected an array of 3 items"));
  CHECK_FALSE(matches(json::array({1}), json::array({1, 1})));
  CHECK_FALSE(matches(json::array(), json::object()));
}

TEST_CASE("a mismatch names the JSON path to it", "[transcript]") {
  json expected = {{"result", {{"tools", {{{"name", "exec"}}, {{"name", "file_read"}}}}}}};
  json actual = {{"result", {{"tools", {{{"name", "exec"}}, {{"name", "file_write"}}}}}}};
  auto diff = match(expected, actual);
  REQUIRE(diff);
  CHECK(*diff == "result.tools[1].name: expected \"file_read\", got \"file_write\"");

  auto top = match(1, 2);
  REQUIRE(top);
  CHECK(*top == "(message): expected 1, got 2");
}

TEST_CASE("substitute_captures replaces <<$NAME>> anywhere and leaves the rest", "[transcript]") {
  Captures captures = {{"pid", 7}, {"sid", "s-1"}};
  json in = {{"params", {{"process_id", "<<$pid>>"}, {"list", {"<<$sid>>", "<<$none>>", "text <<$pid>>"}}}}};
  json out = server::substitute_captures(in, captures);
  CHECK(out == json{{"params", {{"process_id", 7}, {"list", {"s-1", "<<$none>>", "text <<$pid>>"}}}}});
  CHECK(server::substitute_captures("<<$>>", captures) == "<<$>>");
  CHECK(server::substitute_captures(3, captures) == 3);
}

TEST_CASE("loosen_recorded turns run-dependent values into placeholders", "[transcript]") {
  json recorded = {{"duration_ms", 12},
                   {"pid", 4000},
                   {"bytes", 10},
                   {"version", "0.1.0"},
                   {"created_at", "2025-11-29T15:52:00Z"},
                   {"nested", {{{"elapsed_ms", 3.5}, {"name", "keep"}}}},
                   {"duration_text", "12"},
                   {"pid_string", "4000"}};
  json loose = server::loosen_recorded(recorded);
  CHECK(loose == json{{"duration_ms", "<<number>>"},
                      {"pid", "<<number>>"},
                      {"bytes", "<<number>>"},
                      {"version", "<<string>>"},
                      {"created_at", "<<iso8601>>"},
                      {"nested", {{{"elapsed_ms", "<<number>>"}, {"name", "keep"}}}},
                      {"duration_text", "12"},
                      {"pid_string", "4000"}});
  // A loosened recording still matches the run it came from.
  CHECK(matches(loose, recorded));
  // A duration that is not a number is kept as is.
  CHECK(server::loosen_recorded(json{{"duration_ms", "fast"}}) == json{{"duration_ms", "fast"}});
}

TEST_CASE("parse_transcript reads every kind of step with its line", "[transcript]") {
  std::string text =
      "# a comment\n"
      "{\"server_args\": [\"--test-tools\"], \"env\": {\"A\": \"1\"}}\n"
      "\n"
      "{\"in\": {\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}}\n"
      "{\"out\": {\"jsonrpc\": \"2.0\", \"id\": 1, \"result\": {}}}\n"
      "{\"in_raw\": \"{bad\"}\n"
      "{\"in_oversized\": 100}\n"
      "{\"expect_silence_ms\": 50}\n"
      "   # indented comment\n"
      "{\"sleep_ms\": 5}\n"
      "{\"signal\": \"SIGTERM\", \"expect_exit_within_ms\": 300}\n"
      "{\"close_stdin\": true}\n";
  auto transcript = server::parse_transcript(text);
  CHECK(transcript.server_args == std::vector<std::string>{"--test-tools"});
  CHECK(transcript.env == std::map<std::string, std::string>{{"A", "1"}});
  using Kind = TranscriptStep::Kind;
  REQUIRE(transcript.steps.size() == 8);
  CHECK(transcript.steps[0].kind == Kind::Send);
  CHECK(transcript.steps[0].line == 4);
  CHECK(transcript.steps[0].value["method"] == "ping");
  CHECK(transcript.steps[1].kind == Kind::Expect);
  CHECK(transcript.steps[2].kind == Kind::SendRaw);
  CHECK(transcript.steps[2].value == "{bad");
  CHECK(transcript.steps[3].kind == Kind::SendOversized);
  CHECK(transcript.steps[3].value == 100);
  CHECK(transcript.steps[4].kind == Kind::Silence);
  CHECK(transcript.steps[4].ms == 50);
  CHECK(transcript.steps[5].kind == Kind::Sleep);
  CHECK(transcript.steps[5].line == 10);
  CHECK(transcript.steps[6].kind == Kind::Signal);
  CHECK(transcript.steps[6].value == "SIGTERM");
  CHECK(transcript.steps[6].ms == 300);
  CHECK(transcript.steps[7].kind == Kind::CloseInput);
  CHECK(transcript.steps[7].ms == 2000);  // the default deadline
}

TEST_CASE("parse_transcript errors name the line", "[transcript]") {
  auto error_for = [](const std::string& text) {
    try {
      server::parse_transcript(text);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_for("# ok\n{not json}\n"), Catch::StartsWith("transcript line 2: not a JSON object"));
  CHECK_THAT(error_for("\n\n[1, 2]\n"), Catch::StartsWith("transcript line 3: not a JSON object"));
  CHECK_THAT(error_for("{\"in_raw\": 5}\n"), Catch::StartsWith("transcript line 1: in_raw must be a string"));
  CHECK_THAT(error_for("{\"in\": {}}\n{\"bogus\": 1}\n"), Catch::StartsWith("transcript line 2: unknown entry"));
  CHECK_THAT(error_for("{\"sleep_ms\": \"soon\"}\n"), Catch::StartsWith("transcript line 1:"));
  CHECK_THAT(error_for("{\"server_args\": [1]}\n"), Catch::StartsWith("transcript line 1:"));
}
