// The one way to parse JSON text that came from outside the process (the
// host on stdin, an agent's pipe, a recording, a transcript): json::parse's
// result, with nesting limited to kMaxNestingDepth levels.
//
// Why: nlohmann parses iteratively, but copying, comparing and dumping a
// value recurse once per level, so a 140 KB line of 70,000 nested brackets
// overflows the stack wherever it is next copied or logged (docs/protocol.md,
// "Nesting depth"). The limit is checked while parsing, so a deep line costs
// no more than reading it; a normal line costs nothing extra (read_json, the
// fast path, already stops at 64 levels and hands deeper text over here).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string_view>

namespace agentbox::rpc {

inline constexpr std::size_t kMaxNestingDepth = 256;

struct ParsedJson {
  enum class Failure { None, NotJson, TooDeep };
  // The value when failure is None. When TooDeep: what was read before the
  // limit was hit (the top-level members that came first, so a message's
  // "id" can still be answered); discarded when NotJson.
  nlohmann::json value;
  Failure failure = Failure::None;
  std::size_t depth = 0;  // when TooDeep: how deep the text nests

  bool ok() const { return failure == Failure::None; }
};

ParsedJson parse_json(std::string_view text);

// The deepest nesting of arrays and objects in text, counted outside strings
// (for the error message; text need not be valid JSON).
std::size_t nesting_depth(std::string_view text);

}  // namespace agentbox::rpc
