// Transcripts: JSON lines of messages in and out of a server, as written by
// --record and as kept under tests/transcripts/. Expected values may hold
// placeholders for what varies between runs:
//   "<<any>>" "<<string>>" "<<number>>" "<<integer>>" "<<bool>>" "<<object>>"
//   "<<array>>" "<<null>>" "<<iso8601>>" "<<re:REGEX>>" "<<contains:TEXT>>"
//   "<<capture:NAME>>" (matches anything, remembers it) and "<<$NAME>>" (a
//   remembered value, also substituted into later "in" messages).
// An object with the key "<<more>>" accepts keys it does not list.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::server {

using json = nlohmann::json;

// One step of a transcript.
struct TranscriptStep {
  enum class Kind {
    Send,           // {"in": message}
    SendRaw,        // {"in_raw": "text"}: sent as one line, as is
    SendOversized,  // {"in_oversized": bytes}: a line of that many bytes
    Expect,         // {"out": message}
    Silence,        // {"expect_silence_ms": N}: nothing may arrive for N ms
    Sleep,          // {"sleep_ms": N}
    CloseInput,     // {"close_stdin": true, "expect_exit_within_ms": N}
    Signal,         // {"signal": "SIGTERM", "expect_exit_within_ms": N}
  };
  Kind kind;
  json value;        // the message, raw text, byte count or signal name
  long long ms = 0;  // for Silence, Sleep, CloseInput and Signal
  int line = 0;      // in the transcript file, for reports
};

struct Transcript {
  std::vector<std::string> server_args;  // from a {"server_args": [...]} line
  std::map<std::string, std::string> env;  // from {"env": {...}}
  std::vector<TranscriptStep> steps;
};

// Parses a transcript; throws std::runtime_error naming the line on a mistake.
Transcript parse_transcript(const std::string& text);

// Matches actual against expected, filling captures. On a mismatch returns a
// description with the JSON path ("result.tools[0].name: expected ..., got ...").
std::optional<std::string> match_json(const json& expected, const json& actual,
                                      std::map<std::string, json>& captures, const std::string& path = "");

// Replaces "<<$NAME>>" strings with captured values (for messages to send).
json substitute_captures(const json& value, const std::map<std::string, json>& captures);

// Turns values that differ on every run in a recording (durations, times, pids)
// into placeholders, so a --record file replays without edits.
json loosen_recorded(const json& expected);

}  // namespace agentbox::server
