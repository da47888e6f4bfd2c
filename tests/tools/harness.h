// What every tools test uses: the real tool registry (tools::register_all)
// over some Sandboxes, a CallContext that records progress, a call that waits
// for the reply, and the result checked against its tool's outputSchema
// (schemas/*.json, with valijson, as hosts check it) and against the shape
// docs/protocol.md "Error results" gives an error: no structuredContent, a
// text that starts with the code, the error object with code and message.
#pragma once

#include "sandbox/sandboxes.h"
#include "tools/register.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <mutex>
#include <vector>

namespace agentbox::sandbox {
class ManagerSandboxes;
}

namespace agentbox::tools::test {

struct Progress {
  double done;
  std::optional<double> total;
  std::string message;
};

class TestContext : public CallContext {
 public:
  explicit TestContext(std::string conversation) : conversation_(std::move(conversation)) {}
  const std::string& conversation() const override { return conversation_; }
  void progress(double done, std::optional<double> total, const std::string& message) override;
  bool cancelled() const override { return false; }
  void on_cancel(std::function<void()>) override {}
  std::vector<Progress> reports() const;

 private:
  std::string conversation_;
  mutable std::mutex mutex_;
  std::vector<Progress> reports_;
};

class ToolHarness {
 public:
  // Tools over sandboxes; null: a server without sandbox support.
  explicit ToolHarness(sandbox::Sandboxes* sandboxes);
  // Tools whose sandboxes() throws error (the manager could not start).
  explicit ToolHarness(const SandboxError& error);

  // Calls the tool as the server does after validating the arguments, and
  // waits for its reply. context, when given, is the call's.
  ToolResult call(const std::string& tool, const json& arguments = json::object(),
                  std::shared_ptr<TestContext> context = nullptr);
  // call(), with the result checked by wrong_shape.
  ToolResult checked(const std::string& tool, const json& arguments = json::object());
  // Why arguments do not pass the tool's inputSchema ("arguments.path: is
  // required"), or empty.
  std::string invalid(const std::string& tool, const json& arguments) const;
  // Why a result is not what the tool must answer, or empty.
  std::string wrong_shape(const std::string& tool, const ToolResult& result) const;

  Registry registry;
  Services services;
};

// The error result's code, after checking its shape (fails the test if it is
// not an error).
std::string error_code(const ToolResult& result);

// Real sandboxes: a Manager over a fresh state directory (removed at the
// end) behind the adapter the server uses. No spare is prepared and
// workspaces are plain directories, so nothing starts until a call needs a
// sandbox (then bwrap and the test agent).
struct ManagerFixture {
  // snapshot_chain 1: every snapshot complete (stands alone); warm_cache 0:
  // every restore extracts.
  explicit ManagerFixture(sandbox::Limits limits = {},
                          std::size_t snapshot_chain = persistence::SnapshotStore::kDefaultMaxChain,
                          std::optional<std::uint64_t> warm_cache = std::nullopt);
  ~ManagerFixture();
  std::filesystem::path state_dir;
  std::unique_ptr<sandbox::ManagerSandboxes> sandboxes;
};

}  // namespace agentbox::tools::test
