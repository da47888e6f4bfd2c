#include "server/transcript.h"

#include "rpc/json_parse.h"

#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace agentbox::server {

namespace {

const std::regex& iso8601() {
  static const std::regex re(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}))");
  return re;
}

std::string brief(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

std::string mismatch(const std::string& path, const std::string& expected, const json& actual) {
  return (path.empty() ? std::string("(message)") : path) + ": expected " + expected + ", got " + brief(actual);
}

std::optional<std::string> match_placeholder(const std::string& p, const json& actual,
                                             std::map<std::string, json>& captures, const std::string& path) {
  std::string expect = "<<" + p + ">>";
  bool matched;
  if (p == "any") matched = true;
  else if (p == "string") matched = actual.is_string();
  else if (p == "number") matched = actual.is_number();
  else if (p == "integer") matched = actual.is_number_integer();
  else if (p == "bool") matched = actual.is_boolean();
  else if (p == "object") matched = actual.is_object();
  else if (p == "array") matched = actual.is_array();
  else if (p == "null") matched = actual.is_null();
  else if (p == "iso8601") matched = actual.is_string() && std::regex_match(actual.get<std::string>(), iso8601());
  else if (p.rfind("re:", 0) == 0) {
    std::regex re;
    try {
      re = std::regex(p.substr(3));
    } catch (const std::regex_error& e) {
      return path + ": bad regular expression in " + expect + ": " + e.what();
    }
    matched = actual.is_string() && std::regex_search(actual.get<std::string>(), re);
  }
  else if (p.rfind("contains:", 0) == 0)
    matched = actual.is_string() && actual.get<std::string>().find(p.substr(9)) != std::string::npos;
  else if (p.rfind("capture:", 0) == 0) {
    captures[p.substr(8)] = actual;
    matched = true;
  } else if (p.rfind("$", 0) == 0) {
    auto it = captures.find(p.substr(1));
    if (it == captures.end()) return path + ": placeholder " + expect + " names nothing captured yet";
    if (it->second != actual) return mismatch(path, brief(it->second) + " (captured as " + p.substr(1) + ")", actual);
    matched = true;
  } else {
    return path + ": unknown placeholder " + expect;
  }
  if (matched) return std::nullopt;
  return mismatch(path, expect, actual);
}

std::string child_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

}  // namespace

std::optional<std::string> match_json(const json& expected, const json& actual, std::map<std::string, json>& captures,
                                      const std::string& path) {
  if (expected.is_string()) {
    const auto& s = expected.get_ref<const std::string&>();
    if (s.size() >= 4 && s.rfind("<<", 0) == 0 && s.compare(s.size() - 2, 2, ">>") == 0)
      return match_placeholder(s.substr(2, s.size() - 4), actual, captures, path);
  }
  if (expected.is_object()) {
    if (!actual.is_object()) return mismatch(path, "an object", actual);
    bool more = expected.contains("<<more>>");
    for (const auto& [key, value] : expected.items()) {
      if (key == "<<more>>") continue;
      if (!actual.contains(key)) return child_path(path, key) + ": missing (expected " + brief(value) + ")";
      if (auto diff = match_json(value, actual[key], captures, child_path(path, key))) return diff;
    }
    if (!more)
      for (const auto& [key, value] : actual.items())
        if (!expected.contains(key)) return child_path(path, key) + ": unexpected key (value " + brief(value) + ")";
    return std::nullopt;
  }
  if (expected.is_array()) {
    if (!actual.is_array()) return mismatch(path, "an array", actual);
    if (expected.size() != actual.size())
      return mismatch(path, "an array of " + std::to_string(expected.size()) + " items", actual);
    for (std::size_t i = 0; i < expected.size(); ++i)
      if (auto diff = match_json(expected[i], actual[i], captures, path + "[" + std::to_string(i) + "]")) return diff;
    return std::nullopt;
  }
  // Numbers compare by value whatever their JSON representation (1 == 1.0).
  if (expected.is_number() && actual.is_number()) {
    if (expected.get<double>() == actual.get<double>()) return std::nullopt;
    return mismatch(path, brief(expected), actual);
  }
  if (expected != actual) return mismatch(path, brief(expected), actual);
  return std::nullopt;
}

json substitute_captures(const json& value, const std::map<std::string, json>& captures) {
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s.size() > 5 && s.rfind("<<$", 0) == 0 && s.compare(s.size() - 2, 2, ">>") == 0) {
      auto it = captures.find(s.substr(3, s.size() - 5));
      if (it != captures.end()) return it->second;
    }
    return value;
  }
  if (value.is_object() || value.is_array()) {
    json out = value;
    for (auto& item : out) item = substitute_captures(item, captures);
    return out;
  }
  return value;
}

namespace {

// Values the server generates anew on every run: sandbox, snapshot and
// process ids. Collected per message, so the text that repeats them matches too.
void collect_generated(const json& value, std::set<std::string>& names) {
  static const std::set<std::string> keys = {"sandbox", "snapshot", "process_id"};
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      if (keys.count(key) && item.is_string() && !item.get_ref<const std::string&>().empty())
        names.insert(item.get<std::string>());
      collect_generated(item, names);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) collect_generated(item, names);
  }
}

json loosen(const json& expected, const std::set<std::string>& generated) {
  static const std::set<std::string> numbers = {"duration_ms", "restore_ms", "pid", "elapsed_ms", "bytes",
                                                "workspace_bytes"};
  if (expected.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : expected.items()) {
      if (numbers.count(key) && value.is_number()) out[key] = "<<number>>";
      else if (key == "version" && value.is_string()) out[key] = "<<string>>";
      else out[key] = loosen(value, generated);
    }
    return out;
  }
  if (expected.is_array()) {
    json out = json::array();
    for (const auto& item : expected) out.push_back(loosen(item, generated));
    return out;
  }
  if (!expected.is_string()) return expected;
  const std::string& text = expected.get_ref<const std::string&>();
  if (std::regex_match(text, iso8601())) return "<<iso8601>>";
  if (generated.count(text)) return "<<string>>";
  // Text summaries mention durations ("[exit code 0, 2 ms]") and generated
  // ids: match any number and any id there.
  static const std::regex duration(R"(\b\d+ ms\b)");
  bool has_name = false;
  for (const auto& name : generated) has_name |= text.find(name) != std::string::npos;
  if (!has_name && !std::regex_search(text, duration)) return expected;
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  std::string pattern = std::regex_replace(text, special, "\\$&");
  for (const auto& name : generated) {
    std::string escaped = std::regex_replace(name, special, "\\$&");
    for (auto at = pattern.find(escaped); at != std::string::npos; at = pattern.find(escaped, at + 1))
      pattern.replace(at, escaped.size(), "[A-Za-z0-9_.:-]+");
  }
  return "<<re:^" + std::regex_replace(pattern, duration, "\\d+ ms") + "$>>";
}

}  // namespace

json loosen_recorded(const json& expected) {
  std::set<std::string> generated;
  collect_generated(expected, generated);
  return loosen(expected, generated);
}

Transcript parse_transcript(const std::string& text) {
  Transcript out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("transcript line " + std::to_string(number) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++number;
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    rpc::ParsedJson parsed = rpc::parse_json(line);
    if (parsed.failure == rpc::ParsedJson::Failure::TooDeep)
      fail("nests " + std::to_string(parsed.depth) + " levels deep, over the limit of " +
           std::to_string(rpc::kMaxNestingDepth) + " (send such a line with in_raw)");
    json entry = std::move(parsed.value);
    if (!parsed.ok() || !entry.is_object()) fail("not a JSON object");
    // A value of the wrong type (a string for sleep_ms, ...) is a mistake on
    // this line too, not an error without a line number.
    try {
      using Kind = TranscriptStep::Kind;
      auto ms = [&](const char* key) { return entry.value(key, 2000LL); };
      if (entry.contains("server_args")) {
        for (const auto& arg : entry["server_args"]) out.server_args.push_back(arg.get<std::string>());
        if (entry.contains("env"))
          for (const auto& [k, v] : entry["env"].items()) out.env[k] = v.get<std::string>();
      } else if (entry.contains("in")) {
        out.steps.push_back({Kind::Send, entry["in"], 0, number});
      } else if (entry.contains("in_raw")) {
        if (!entry["in_raw"].is_string()) fail("in_raw must be a string");
        out.steps.push_back({Kind::SendRaw, entry["in_raw"], 0, number});
      } else if (entry.contains("in_oversized")) {
        out.steps.push_back({Kind::SendOversized, entry["in_oversized"], 0, number});
      } else if (entry.contains("out")) {
        out.steps.push_back({Kind::Expect, entry["out"], 0, number});
      } else if (entry.contains("expect_silence_ms")) {
        out.steps.push_back({Kind::Silence, nullptr, entry["expect_silence_ms"].get<long long>(), number});
      } else if (entry.contains("sleep_ms")) {
        out.steps.push_back({Kind::Sleep, nullptr, entry["sleep_ms"].get<long long>(), number});
      } else if (entry.contains("close_stdin")) {
        out.steps.push_back({Kind::CloseInput, nullptr, ms("expect_exit_within_ms"), number});
      } else if (entry.contains("signal")) {
        out.steps.push_back({Kind::Signal, entry["signal"], ms("expect_exit_within_ms"), number});
      } else {
        fail("unknown entry (expected in, in_raw, in_oversized, out, expect_silence_ms, sleep_ms, close_stdin, "
             "signal or server_args)");
      }
    } catch (const json::exception& e) {
      fail(std::string("bad value: ") + e.what());
    }
  }
  return out;
}

}  // namespace agentbox::server
