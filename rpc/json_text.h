// JSON text in and out for the JSON-RPC hot paths (server <-> agent <-> host),
// where one message may carry a megabyte-long string (a file page). Results
// are the same as nlohmann's own dump and parse; these functions are faster
// because they copy runs of plain bytes eight at a time instead of decoding
// byte by byte, and they hand anything unusual back to nlohmann.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace agentbox::rpc {

// Byte for byte what value.dump(-1, ' ', false, error_handler_t::replace)
// writes, invalid UTF-8 replaced by U+FFFD the same way.
std::string write_json(const nlohmann::json& value);

// The value json::parse(text) gives, for text made of objects, arrays,
// strings, integers, booleans and null that is valid JSON. nullopt for
// anything else: invalid JSON, floating-point numbers, integers out of
// range, nesting deeper than 64; the caller then parses with nlohmann,
// which decides (and reports errors).
std::optional<nlohmann::json> read_json(std::string_view text);

}  // namespace agentbox::rpc
