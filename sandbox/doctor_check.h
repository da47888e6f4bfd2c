// One line of `agentbox doctor` (app/doctor.h): what a check of the host found,
// ok / warn / FAIL, with plain words on what to change. Sandbox modules that
// know a host requirement (uid_range.h) report it in this form.
#pragma once

#include <string>

namespace agentbox::sandbox {

struct DoctorCheck {
  std::string name;
  enum class Level { Ok, Warn, Fail } level = Level::Ok;
  std::string detail;
};

}  // namespace agentbox::sandbox
