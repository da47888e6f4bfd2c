#include "sandbox/errors.h"

#include <cstring>

namespace agentbox::sandbox {

std::string errno_message(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace agentbox::sandbox
