// tools/sandbox_call: agent_array, how formatters read a list out of an
// agent's result (written in the box, so anything may be missing or of the
// wrong type; docs/sandbox.md, "The wall between host and box").
#include "tools/sandbox_call.h"

#include <catch2/catch.hpp>

using agentbox::tools::agent_array;
using json = nlohmann::json;

TEST_CASE("agent_array returns a list and throws where operator[] would be undefined", "[tools][wall]") {
  const json good = {{"entries", {{{"path", "a"}}, {{"path", "b"}}}}};
  CHECK(agent_array(good, "entries").size() == 2);
  const json missing = json::object();
  CHECK_THROWS_WITH(agent_array(missing, "entries"), "\"entries\" is not an array");
  const json wrong = {{"entries", "not a list"}};
  CHECK_THROWS(agent_array(wrong, "entries"));
  const json not_object = json::array({1, 2});
  CHECK_THROWS(agent_array(not_object, "entries"));
  CHECK_THROWS(agent_array(json(5), "entries"));
}
