// The one spelling of a failed system call in a message: "what: strerror".
#pragma once

#include <string>

namespace agentbox::os {

// "what: strerror(err)", e.g. "cannot open /x: No such file or directory".
std::string errno_text(const std::string& what, int err);

}  // namespace agentbox::os
