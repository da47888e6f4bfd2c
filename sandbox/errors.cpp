#include "sandbox/errors.h"

#include <cstring>

namespace agentbox::sandbox {

bool codes::known(std::string_view code) {
  for (const char* known_code : kAll)
    if (code == known_code) return true;
  return false;
}

std::string errno_message(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace agentbox::sandbox
