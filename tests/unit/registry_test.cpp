// tools/registry: tools bound to their embedded schemas, and argument
// validation that names the offending field. Uses the embedded sandbox_status
// and test/debug_sleep schemas.
#include "tools/registry.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>

using agentbox::tools::Registry;
using agentbox::tools::ValidationError;
using json = nlohmann::json;
namespace tools = agentbox::tools;

namespace {

void unused_tool(const json&, std::shared_ptr<tools::CallContext>, tools::ToolReply) {}

struct Fixture {
  Registry registry;
  Fixture() {
    // Added out of order, to show definitions() sorts.
    registry.add("test/debug_sleep", unused_tool);
    registry.add("sandbox_status", unused_tool);
  }

  std::optional<ValidationError> validate(const std::string& tool, const json& arguments) {
    const auto* entry = registry.find(tool);
    REQUIRE(entry);
    return registry.validate(*entry, arguments);
  }
};

}  // namespace

TEST_CASE("the test schemas are embedded under their paths", "[registry]") {
  const auto& schemas = tools::embedded_schemas();
  CHECK(schemas.count("sandbox_status") == 1);
  CHECK(schemas.count("test/debug_sleep") == 1);
}

TEST_CASE_METHOD(Fixture, "definitions come from the schema files, sorted by name", "[registry]") {
  auto definitions = registry.definitions();
  REQUIRE(definitions.size() == 2);
  CHECK(definitions[0]["name"] == "debug_sleep");
  CHECK(definitions[1]["name"] == "sandbox_status");
  for (const auto& definition : definitions) {
    INFO(definition["name"]);
    for (const char* key : {"title", "description", "inputSchema", "outputSchema", "annotations"})
      CHECK(definition.contains(key));
  }
  const auto* status = registry.find("sandbox_status");
  REQUIRE(status);
  CHECK(registry.definition(*status) == definitions[1]);
  CHECK(registry.function(*status));
  CHECK_FALSE(registry.find("test/debug_sleep"));  // found by tool name, not schema path
  CHECK_FALSE(registry.find("nope"));
}

TEST_CASE_METHOD(Fixture, "valid arguments pass", "[registry]") {
  CHECK_FALSE(validate("sandbox_status", json::object()));
  CHECK_FALSE(validate("sandbox_status", {{"conversation", "c1"}}));
  // A sandbox-level tool takes no session (docs/protocol.md, "Tool schemas").
  auto session = validate("sandbox_status", {{"conversation", "c1"}, {"session", "s"}});
  REQUIRE(session);
  CHECK(session->field == "arguments.session");
  CHECK_FALSE(validate("debug_sleep", {{"steps", 1}, {"step_ms", 0}, {"echo", "x"}, {"fail", true}}));
}

TEST_CASE_METHOD(Fixture, "a value of the wrong type names the field and the type", "[registry]") {
  auto error = validate("debug_sleep", {{"steps", "three"}, {"step_ms", 1}});
  REQUIRE(error);
  CHECK(error->field == "arguments.steps");
  CHECK(error->message == "must be of type \"integer\"");

  auto boolean = validate("debug_sleep", {{"steps", 1}, {"step_ms", 1}, {"fail", "yes"}});
  REQUIRE(boolean);
  CHECK(boolean->field == "arguments.fail");
  CHECK_THAT(boolean->message, Catch::Contains("boolean"));
}

TEST_CASE_METHOD(Fixture, "a missing required argument is named", "[registry]") {
  auto error = validate("debug_sleep", {{"steps", 1}});
  REQUIRE(error);
  CHECK(error->field == "arguments.step_ms");
  CHECK(error->message == "is required");
}

TEST_CASE_METHOD(Fixture, "an unknown argument is named", "[registry]") {
  auto error = validate("sandbox_status", {{"conversaton", "typo"}});
  REQUIRE(error);
  CHECK(error->field == "arguments.conversaton");
  CHECK(error->message == "is not a known argument");
}

TEST_CASE_METHOD(Fixture, "a value below the minimum names the field", "[registry]") {
  auto error = validate("debug_sleep", {{"steps", 0}, {"step_ms", 1}});
  REQUIRE(error);
  CHECK(error->field == "arguments.steps");
  CHECK(error->message == "must be greater than or equal to 1");  // the schema's integer, not "1.000000"

  auto above = validate("debug_sleep", {{"steps", 1}, {"step_ms", 10001}});
  REQUIRE(above);
  CHECK(above->field == "arguments.step_ms");
  CHECK(above->message == "must be less than or equal to 10000");
}

TEST_CASE_METHOD(Fixture, "a string constraint names the field and the bound", "[registry]") {
  auto error = validate("sandbox_status", {{"conversation", ""}});
  REQUIRE(error);
  CHECK(error->field == "arguments.conversation");
  CHECK(error->message == "must not be empty");
  auto long_one = validate("sandbox_status", {{"conversation", std::string(257, 'c')}});
  REQUIRE(long_one);
  CHECK(long_one->message == "must have at most 256 characters");
}

TEST_CASE("an enum mismatch lists the allowed values", "[registry]") {
  Registry registry;
  registry.add("file_read", unused_tool);
  auto error = registry.validate(*registry.find("file_read"), {{"path", "a"}, {"encoding", "latin1"}});
  REQUIRE(error);
  CHECK(error->field == "arguments.encoding");
  CHECK(error->message == "must be one of \"utf-8\", \"base64\"");
}

// Hosts' schema dialects (docs/protocol.md, "Tool schemas"): Gemini CLI and
// Qwen Code warn on the user's terminal about a union type in an input
// schema; outputs spell nullable as anyOf; `session` only where it is used.
namespace {
void find_unions(const json& schema, const std::string& path, std::vector<std::string>& found) {
  if (schema.is_object()) {
    if (schema.contains("type") && schema["type"].is_array()) found.push_back(path);
    for (const auto& [key, value] : schema.items()) find_unions(value, path + "." + key, found);
  } else if (schema.is_array()) {
    for (const auto& value : schema) find_unions(value, path, found);
  }
}
}  // namespace

TEST_CASE("no tool schema has a union type; session only on the tools that use it", "[registry]") {
  const std::set<std::string> session_tools = {"exec",      "process_start", "session_delete", "file_read",
                                               "file_write", "file_edit",    "file_list",      "file_stat",
                                               "file_mkdir", "file_delete",  "file_move",      "file_search", "terminal_start",
                                               "file_watch"};
  std::vector<std::string> unions, sessions;
  for (const auto& [name, text] : tools::embedded_schemas()) {
    if (name.rfind("test/", 0) == 0) continue;
    json tool = json::parse(text);
    find_unions(tool["inputSchema"], tool["name"].get<std::string>() + ".inputSchema", unions);
    find_unions(tool["outputSchema"], tool["name"].get<std::string>() + ".outputSchema", unions);
    for (const char* key : {"oneOf", "anyOf", "allOf"}) CHECK_FALSE(tool["inputSchema"].contains(key));
    CHECK(tool["inputSchema"]["properties"].contains("conversation"));
    if (tool["inputSchema"]["properties"].contains("session")) sessions.push_back(tool["name"]);
  }
  CHECK(unions == std::vector<std::string>{});
  CHECK(std::set<std::string>(sessions.begin(), sessions.end()) == session_tools);
}

TEST_CASE_METHOD(Fixture, "an object where a string is expected names the field, not its contents", "[registry]") {
  auto error = validate("debug_sleep", {{"steps", 1}, {"step_ms", 1}, {"echo", {{"nested", 1}}}});
  REQUIRE(error);
  CHECK(error->field == "arguments.echo");
  CHECK(error->message == "must be of type \"string\"");
}

TEST_CASE("adding an unknown schema, or the same tool twice, throws", "[registry]") {
  Registry registry;
  CHECK_THROWS_AS(registry.add("no_such_tool", unused_tool), std::logic_error);
  CHECK_THROWS_WITH(registry.add("test/nope", unused_tool), Catch::Contains("schemas/test/nope.json"));
  registry.add("sandbox_status", unused_tool);
  CHECK_THROWS_WITH(registry.add("sandbox_status", unused_tool), Catch::Contains("registered twice"));
  CHECK(registry.definitions().size() == 1);
}
