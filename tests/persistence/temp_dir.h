// A fresh, empty scratch directory per test, named after the suite and the
// test so leftovers of a failed run are easy to tell apart.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>

namespace agentbox::persistence::test {

inline std::filesystem::path fresh_temp_dir(const std::string& suite, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("agentbox-" + suite + "-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace agentbox::persistence::test
