// tools/registry: tools bound to their embedded schemas, and argument
// validation that names the offending field. Uses the embedded sandbox_status
// and test/debug_sleep schemas.
#include "tools/registry.h"

#include <catch2/catch.hpp>

#include <algorithm>
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
  CHECK_FALSE(validate("sandbox_status", {{"conversation", "c1"}, {"session", "s"}}));
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

TEST_CASE_METHOD(Fixture, "a string constraint names the field", "[registry]") {
  auto error = validate("sandbox_status", {{"conversation", ""}});
  REQUIRE(error);
  CHECK(error->field == "arguments.conversation");
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
