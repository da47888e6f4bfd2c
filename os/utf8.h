// Cutting text without splitting a UTF-8 sequence: output and file pages are
// shortened to a byte budget and must stay valid text for JSON.
#pragma once

#include <cstddef>
#include <string_view>

namespace agentbox::os {

// s shortened to at most n bytes, cut at the end (prefix) or at the front
// (suffix), on a character boundary.
std::string_view utf8_prefix(std::string_view s, std::size_t n);
std::string_view utf8_suffix(std::string_view s, std::size_t n);

}  // namespace agentbox::os
