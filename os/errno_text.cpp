#include "os/errno_text.h"

#include <cstring>

namespace agentbox::os {

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace agentbox::os
