#include "os/utf8.h"

namespace agentbox::os {

std::string_view utf8_prefix(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t end = n;
  // Step back over continuation bytes (10xxxxxx) so the cut lands on a boundary.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

std::string_view utf8_suffix(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t start = s.size() - n;
  while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
  return s.substr(start);
}

}  // namespace agentbox::os
