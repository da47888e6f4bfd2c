// The tool registry: every tool is declared by a JSON file under schemas/
// (embedded into the binary at build time) and bound here to the function that
// serves it. The schema is the single source of truth for tools/list and for
// argument validation.
#pragma once

#include "tools/tool.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentbox::tools {

// A failed validation: the JSON path of the offending field
// ("arguments.timeout_ms") and what is wrong with it.
struct ValidationError {
  std::string field;
  std::string message;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Binds the tool declared in schemas/<schema>.json. Throws std::logic_error
  // when the schema is missing or malformed, or the name is taken: that is a
  // build mistake, caught by the first test that starts the server.
  // run_inline, when given, says for which arguments the function never
  // blocks, so the server may call it on its stdin reader thread.
  using RunInline = std::function<bool(const json& arguments)>;
  void add(const std::string& schema, ToolFunction function, RunInline run_inline = {});

  // Tool definitions in a stable order (sorted by name).
  std::vector<json> definitions() const;

  struct Entry;
  const Entry* find(const std::string& name) const;
  std::optional<ValidationError> validate(const Entry& tool, const json& arguments) const;
  const ToolFunction& function(const Entry& tool) const;
  bool runs_inline(const std::string& name, const json& arguments) const;
  // Calls of a tool that runs in a session (exec, process_start, the file
  // tools) keep their arrival order within the conversation
  // (docs/protocol.md, "Order"). Sandbox-level tools are not ordered: a
  // sandbox_destroy must not wait behind calls a frozen sandbox never takes.
  void keep_session_order(const std::string& name);
  bool keeps_session_order(const std::string& name) const;
  const json& definition(const Entry& tool) const;

 private:
  std::map<std::string, std::unique_ptr<Entry>> tools_;
};

// The embedded schema files, by path relative to schemas/ without ".json"
// ("exec", "test/debug_sleep").
const std::map<std::string, std::string_view>& embedded_schemas();

}  // namespace agentbox::tools
