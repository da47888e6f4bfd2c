#include "contract/errors.h"

namespace agentbox {

bool codes::known(std::string_view code) {
  for (const char* known_code : kAll)
    if (code == known_code) return true;
  return false;
}

}  // namespace agentbox
