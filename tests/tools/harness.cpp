#include "harness.h"

#include "sandbox/manager_sandboxes.h"

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <chrono>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <unistd.h>

namespace agentbox::tools::test {

void TestContext::progress(double done, std::optional<double> total, const std::string& message) {
  std::lock_guard lock(mutex_);
  reports_.push_back({done, total, message});
}

std::vector<Progress> TestContext::reports() const {
  std::lock_guard lock(mutex_);
  return reports_;
}

ToolHarness::ToolHarness(sandbox::Sandboxes* sandboxes) {
  if (sandboxes) {
    services.sandboxes = [sandboxes] { return sandboxes; };
    services.sandboxes_ready = [] { return true; };
  }
  register_all(registry, services);
}

ToolHarness::ToolHarness(const SandboxError& error) {
  services.sandboxes = [error]() -> sandbox::Sandboxes* { throw error; };
  services.sandboxes_ready = [] { return true; };
  register_all(registry, services);
}

ToolResult ToolHarness::call(const std::string& tool, const json& arguments, std::shared_ptr<TestContext> context) {
  const auto* entry = registry.find(tool);
  if (!entry) throw std::logic_error("no tool " + tool);
  if (auto invalid = registry.validate(*entry, arguments))
    throw std::logic_error(tool + " arguments do not validate: " + invalid->field + ": " + invalid->message);
  if (!context) context = std::make_shared<TestContext>(arguments.value("conversation", "test"));
  auto answer = std::make_shared<std::promise<ToolResult>>();
  auto future = answer->get_future();
  registry.function(*entry)(arguments, context, ToolReply(tool, [answer](ToolResult r) { answer->set_value(std::move(r)); }));
  if (future.wait_for(std::chrono::minutes(3)) != std::future_status::ready)
    throw std::runtime_error(tool + " gave no answer within 3 minutes");
  return future.get();
}

ToolResult ToolHarness::checked(const std::string& tool, const json& arguments) {
  auto result = call(tool, arguments);
  INFO(tool << ": " << result.text);
  CHECK(wrong_shape(tool, result) == "");
  return result;
}

std::string ToolHarness::invalid(const std::string& tool, const json& arguments) const {
  const auto* entry = registry.find(tool);
  if (!entry) throw std::logic_error("no tool " + tool);
  auto error = registry.validate(*entry, arguments);
  return error ? error->field + ": " + error->message : "";
}

namespace {

// Where the structured result fails the schema, innermost first.
std::string schema_errors(const json& schema, const json& value) {
  valijson::Schema parsed;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema);
  parser.populateSchema(schema_adapter, parsed);
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter value_adapter(value);
  if (validator.validate(parsed, value_adapter, &results)) return "";
  std::string out;
  valijson::ValidationResults::Error error;
  while (results.popError(error)) {
    std::string where;
    for (const auto& part : error.context) where += part;
    out += where + ": " + error.description + "\n";
  }
  return out;
}

}  // namespace

std::string ToolHarness::wrong_shape(const std::string& tool, const ToolResult& result) const {
  const auto* entry = registry.find(tool);
  if (!entry) return "no tool " + tool;
  if (result.is_error) {
    if (!result.structured.is_null()) return "an error result carries structuredContent: " + result.structured.dump();
    if (!result.error_object.is_object() || !result.error_object["code"].is_string() ||
        !result.error_object["message"].is_string())
      return "the error object lacks code or message: " + result.error_object.dump();
    std::string code = result.error_object["code"];
    if (result.text.rfind(code + ": ", 0) != 0) return "the text does not start with the code: " + result.text;
    return "";
  }
  if (result.text.empty()) return "no text content";
  const json& definition = registry.definition(*entry);
  if (!definition.contains("outputSchema")) return "";
  return schema_errors(definition["outputSchema"], result.structured);
}

std::string error_code(const ToolResult& result) {
  INFO(result.text);
  REQUIRE(result.is_error);
  CHECK(result.structured.is_null());
  return result.error_object.value("code", "");
}

ManagerFixture::ManagerFixture(sandbox::Limits limits, std::size_t snapshot_chain,
                               std::optional<std::uint64_t> warm_cache) {
  char tmpl[] = "/tmp/agentbox-tools-test-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  state_dir = tmpl;
  sandbox::ManagerOptions options;
  options.state_dir = state_dir;
  options.limits = limits;
  options.snapshot_chain = snapshot_chain;
  options.warm_cache = warm_cache;
  const char* agent = std::getenv("AGENTBOX_TEST_AGENT");
  options.agent_binary = agent && *agent ? agent : AGENTBOX_TEST_AGENT;
  options.agent_args = {};
  options.spare = sandbox::ManagerOptions::Spare::None;
  options.disk = {0, 0};  // plain directories: no filesystem image per sandbox
  sandboxes = std::make_unique<sandbox::ManagerSandboxes>(std::make_shared<sandbox::Manager>(options));
}

ManagerFixture::~ManagerFixture() {
  sandboxes.reset();
  std::error_code ec;
  std::filesystem::remove_all(state_dir, ec);
}

}  // namespace agentbox::tools::test
