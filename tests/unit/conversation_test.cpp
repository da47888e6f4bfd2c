// server/conversation: which conversation a call belongs to, in order of
// precedence, and the server-wide fallback from the flag and the environment.
#include "server/conversation.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>

using json = nlohmann::json;
using agentbox::server::default_conversation;
using agentbox::server::resolve_conversation;

namespace {

// Sets (or unsets, with nullopt) an environment variable for the scope of a
// test and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const json kAllMeta = {{"vscode.conversationId", "vscode-conv"},
                       {"threadId", "thread-1"},
                       {"x-codex-turn-metadata", {{"thread_id", "codex-thread"}}}};

}  // namespace

TEST_CASE("the conversation argument wins over everything", "[conversation]") {
  CHECK(resolve_conversation({{"conversation", "arg"}}, kAllMeta, "fallback") == "arg");
}

TEST_CASE("then VS Code's conversationId, then threadId, then Codex turn metadata", "[conversation]") {
  json meta = kAllMeta;
  CHECK(resolve_conversation(json::object(), meta, "fallback") == "vscode-conv");
  meta.erase("vscode.conversationId");
  CHECK(resolve_conversation(json::object(), meta, "fallback") == "thread-1");
  meta.erase("threadId");
  CHECK(resolve_conversation(json::object(), meta, "fallback") == "codex-thread");
  meta.erase("x-codex-turn-metadata");
  CHECK(resolve_conversation(json::object(), meta, "fallback") == "fallback");
}

TEST_CASE("Codex turn metadata is read as an object or as a JSON string", "[conversation]") {
  json as_string = {{"x-codex-turn-metadata", json{{"thread_id", "t-str"}, {"turn", 3}}.dump()}};
  CHECK(resolve_conversation(json::object(), as_string, "fb") == "t-str");
  json as_object = {{"x-codex-turn-metadata", {{"thread_id", "t-obj"}}}};
  CHECK(resolve_conversation(json::object(), as_object, "fb") == "t-obj");
}

TEST_CASE("unusable values fall through to the next source", "[conversation]") {
  SECTION("empty or non-string argument") {
    CHECK(resolve_conversation({{"conversation", ""}}, {{"threadId", "t"}}, "fb") == "t");
    CHECK(resolve_conversation({{"conversation", 5}}, {{"threadId", "t"}}, "fb") == "t");
  }
  SECTION("empty or non-string meta values") {
    json meta = {{"vscode.conversationId", ""}, {"threadId", 12}, {"x-codex-turn-metadata", {{"thread_id", ""}}}};
    CHECK(resolve_conversation(json::object(), meta, "fb") == "fb");
  }
  SECTION("Codex metadata that is not valid JSON, or lacks a thread") {
    CHECK(resolve_conversation(json::object(), {{"x-codex-turn-metadata", "{not json"}}, "fb") == "fb");
    CHECK(resolve_conversation(json::object(), {{"x-codex-turn-metadata", "[1]"}}, "fb") == "fb");
    CHECK(resolve_conversation(json::object(), {{"x-codex-turn-metadata", 7}}, "fb") == "fb");
    CHECK(resolve_conversation(json::object(), {{"x-codex-turn-metadata", {{"turn", 1}}}}, "fb") == "fb");
  }
  SECTION("arguments and meta that are not objects") {
    CHECK(resolve_conversation(nullptr, nullptr, "fb") == "fb");
    CHECK(resolve_conversation(json::array({"conversation"}), json("threadId"), "fb") == "fb");
  }
}

TEST_CASE("the default conversation: flag, AGENTBOX_CONVERSATION, CLAUDE_CODE_SESSION_ID, \"default\"",
          "[conversation]") {
  ScopedEnv agentbox("AGENTBOX_CONVERSATION", "from-env");
  ScopedEnv claude("CLAUDE_CODE_SESSION_ID", "claude-session");

  CHECK(default_conversation(std::string("from-flag")) == "from-flag");
  CHECK(default_conversation(std::nullopt) == "from-env");
  CHECK(default_conversation(std::string("")) == "from-env");  // an empty flag is no flag
  {
    ScopedEnv unset("AGENTBOX_CONVERSATION", std::nullopt);
    CHECK(default_conversation(std::nullopt) == "claude-session");
    ScopedEnv unset_claude("CLAUDE_CODE_SESSION_ID", std::nullopt);
    CHECK(default_conversation(std::nullopt) == "default");
  }
  {
    // Empty variables count as unset.
    ScopedEnv empty("AGENTBOX_CONVERSATION", "");
    CHECK(default_conversation(std::nullopt) == "claude-session");
    ScopedEnv empty_claude("CLAUDE_CODE_SESSION_ID", "");
    CHECK(default_conversation(std::nullopt) == "default");
  }
}
