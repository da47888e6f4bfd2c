#include "contract/agent_methods.h"

namespace agentbox::contract {

bool quick_file_call(std::string_view method, const nlohmann::json& params) {
  // Present, not null and not false.
  auto is_set = [&params](const char* name) {
    auto it = params.is_object() ? params.find(name) : params.end();
    return it != params.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
  };
  if (method == methods::kFileRead) return !is_set("start_line") && !is_set("line_count");
  if (method == methods::kFileWrite) return !is_set("sync");
  if (method == methods::kFileDelete) return !is_set("recursive");
  return method == methods::kFileStat || method == methods::kFileMkdir;
}

}  // namespace agentbox::contract
