#include "tools/registry.h"

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <stdexcept>

namespace agentbox::tools {

struct Registry::Entry {
  json definition;
  valijson::Schema input_schema;
  ToolFunction function;
  Registry::RunInline run_inline;
  bool session_order = false;
};

Registry::Registry() = default;
Registry::~Registry() = default;

namespace {

void require(bool ok, const std::string& schema, const std::string& what) {
  if (!ok) throw std::logic_error("schemas/" + schema + ".json: " + what);
}

// valijson reports a context like ["<root>", "[env]", "[PATH]"]; turn it into
// "arguments.env.PATH".
std::string field_path(const std::vector<std::string>& context) {
  std::string path = "arguments";
  for (std::size_t i = 1; i < context.size(); ++i) {
    const std::string& part = context[i];
    if (part.size() >= 2 && part.front() == '[' && part.back() == ']') {
      std::string inner = part.substr(1, part.size() - 2);
      bool index = !inner.empty() && inner.find_first_not_of("0123456789") == std::string::npos;
      path += index ? "[" + inner + "]" : "." + inner;
    } else {
      path += "." + part;
    }
  }
  return path;
}

// The schema that describes `field` ("arguments.env.PATH"), or null.
const json* schema_at(const json& schema, const std::string& field) {
  const json* node = &schema;
  std::size_t pos = std::string("arguments").size();
  while (pos < field.size() && node) {
    std::size_t next = field.find_first_of(".[", pos + 1);
    std::string part = field.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    if (!part.empty() && part.back() == ']') {
      node = node->contains("items") ? &(*node)["items"] : nullptr;
    } else if (node->contains("properties") && (*node)["properties"].contains(part)) {
      node = &(*node)["properties"][part];
    } else if (node->contains("additionalProperties") && (*node)["additionalProperties"].is_object()) {
      node = &(*node)["additionalProperties"];
    } else {
      node = nullptr;
    }
    pos = next == std::string::npos ? field.size() : next;
  }
  return node;
}

// Rewrites valijson's wording into something a model can act on, naming the
// field itself rather than its parent object.
ValidationError describe(const json& input_schema, std::string field, const std::string& raw) {
  auto quoted = [&raw]() -> std::string {
    auto end = raw.rfind('\'');
    auto start = end == std::string::npos ? std::string::npos : raw.rfind('\'', end - 1);
    return start == std::string::npos ? "" : raw.substr(start + 1, end - start - 1);
  };
  if (raw.rfind("Missing required property", 0) == 0) return {field + "." + quoted(), "is required"};
  if (raw.rfind("Object contains a property that could not be validated", 0) == 0)
    return {field + "." + quoted(), "is not a known argument"};
  if (raw.rfind("Value type not permitted", 0) == 0) {
    const json* schema = schema_at(input_schema, field);
    if (schema && schema->contains("type")) return {field, "must be of type " + (*schema)["type"].dump()};
    return {field, "has the wrong type"};
  }
  // valijson prints bounds as doubles ("3600000.000000"): the schema's own
  // numbers read better.
  const json* schema = schema_at(input_schema, field);
  auto has = [schema](const char* key) { return schema && schema->contains(key); };
  if (raw.find("less than or equal to") != std::string::npos && has("maximum"))
    return {field, "must be less than or equal to " + (*schema)["maximum"].dump()};
  if (raw.find("greater than or equal to") != std::string::npos && has("minimum"))
    return {field, "must be greater than or equal to " + (*schema)["minimum"].dump()};
  if (raw.find("enum") != std::string::npos && has("enum")) {
    std::string values;
    for (const auto& v : (*schema)["enum"]) values += (values.empty() ? "" : ", ") + v.dump();
    return {field, "must be one of " + values};
  }
  if (raw.find("no fewer than") != std::string::npos && has("minLength"))
    return {field, (*schema)["minLength"] == 1 ? std::string("must not be empty")
                                                : "must have at least " + (*schema)["minLength"].dump() + " characters"};
  if (raw.find("no more than") != std::string::npos && has("maxLength"))
    return {field, "must have at most " + (*schema)["maxLength"].dump() + " characters"};
  if (raw.find("'pattern'") != std::string::npos && has("pattern"))
    return {field, "must match " + (*schema)["pattern"].dump()};
  return {field, "is not valid: " + raw};
}

}  // namespace

void Registry::add(const std::string& schema, ToolFunction function, RunInline run_inline) {
  const auto& files = embedded_schemas();
  auto file = files.find(schema);
  require(file != files.end(), schema, "no such embedded schema");
  json definition = json::parse(file->second, nullptr, false);
  require(!definition.is_discarded() && definition.is_object(), schema, "not a JSON object");
  for (const char* key : {"name", "title", "description", "inputSchema", "annotations"})
    require(definition.contains(key), schema, std::string("missing \"") + key + "\"");
  require(definition["inputSchema"].value("type", "") == "object", schema, "inputSchema must be an object schema");
  std::string name = definition["name"].get<std::string>();
  require(!tools_.count(name), schema, "tool '" + name + "' registered twice");

  auto entry = std::make_unique<Entry>();
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter adapter(definition["inputSchema"]);
  try {
    parser.populateSchema(adapter, entry->input_schema);
  } catch (const std::exception& e) {
    require(false, schema, std::string("inputSchema does not parse: ") + e.what());
  }
  entry->definition = std::move(definition);
  entry->function = std::move(function);
  entry->run_inline = std::move(run_inline);
  tools_.emplace(std::move(name), std::move(entry));
}

bool Registry::runs_inline(const std::string& name, const json& arguments) const {
  auto it = tools_.find(name);
  return it != tools_.end() && it->second->run_inline && it->second->run_inline(arguments);
}

void Registry::keep_session_order(const std::string& name) {
  auto it = tools_.find(name);
  require(it != tools_.end(), name, "keep_session_order before add");
  it->second->session_order = true;
}

bool Registry::keeps_session_order(const std::string& name) const {
  auto it = tools_.find(name);
  return it != tools_.end() && it->second->session_order;
}

std::vector<json> Registry::definitions() const {
  std::vector<json> out;
  out.reserve(tools_.size());
  for (const auto& [name, entry] : tools_) out.push_back(entry->definition);
  return out;
}

const Registry::Entry* Registry::find(const std::string& name) const {
  auto it = tools_.find(name);
  return it == tools_.end() ? nullptr : it->second.get();
}

std::optional<ValidationError> Registry::validate(const Entry& tool, const json& arguments) const {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter adapter(arguments);
  if (validator.validate(tool.input_schema, adapter, &results)) return std::nullopt;
  // valijson reports the innermost failure first, then one error per enclosing
  // level ("failed to validate against schema associated with property ...").
  valijson::ValidationResults::Error error;
  results.popError(error);
  return describe(tool.definition["inputSchema"], field_path(error.context), error.description);
}

const ToolFunction& Registry::function(const Entry& tool) const { return tool.function; }
const json& Registry::definition(const Entry& tool) const { return tool.definition; }

}  // namespace agentbox::tools
