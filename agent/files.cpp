// The file methods' table (files.h): each operation bound to its name, with
// the session's cwd named in its errors. The operations: file_read.cpp,
// file_write.cpp, file_edit.cpp, file_tree.cpp.
#include "agent/files.h"

#include "agent/file_paths.h"

#include <functional>
#include <utility>

namespace agentbox::agent {

void register_file_methods(MethodTable& table, SessionResolver resolve, const AgentConfig& config) {
  auto env = [resolve = std::move(resolve), &config](const json& params) {
    FileEnv e;
    e.cwd = resolve(param_string(params, "session", "default")).cwd;
    e.inline_chars = config.inline_output_chars;
    return e;
  };
  // Every file method's error names the session's cwd when a relative path led there.
  auto bind = [&table, env](const char* method, std::function<json(AgentRequest&, const FileEnv&)> op) {
    table[method] = [env, op](AgentRequest& r) {
      FileEnv e = env(r.params());
      try {
        return op(r, e);
      } catch (const SandboxError& error) {
        throw with_cwd_note(error, r.params(), e.cwd);
      }
    };
  };
  using Op = json (*)(const json&, const FileEnv&);
  namespace m = contract::methods;
  const std::pair<const char*, Op> ops[] = {{m::kFileRead, file_read},   {m::kFileWrite, file_write},
                                            {m::kFileEdit, file_edit},   {m::kFileStat, file_stat},
                                            {m::kFileMkdir, file_mkdir}, {m::kFileDelete, file_delete},
                                            {m::kFileMove, file_move},   {m::kFileList, file_list}};
  for (const auto& [method, op] : ops)
    bind(method, [op = op](AgentRequest& r, const FileEnv& e) { return op(r.params(), e); });
  bind(m::kFileSearch, file_search);
}

}  // namespace agentbox::agent
