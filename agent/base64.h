// Standard base64 (RFC 4648, with padding) for binary file contents in JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace agentbox::agent {

std::string base64_encode(std::string_view data);
// Whitespace is ignored; anything else outside the alphabet, or a wrong
// length, gives nullopt.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace agentbox::agent
