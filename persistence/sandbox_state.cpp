#include "persistence/sandbox_state.h"

#include <array>
#include <utility>

namespace agentbox::persistence {

namespace {

constexpr std::array<std::pair<SandboxState, std::string_view>, 9> kNames{{
    {SandboxState::None, "none"},
    {SandboxState::Starting, "starting"},
    {SandboxState::Active, "active"},
    {SandboxState::Snapshotting, "snapshotting"},
    {SandboxState::Stopped, "stopped"},
    {SandboxState::Restoring, "restoring"},
    {SandboxState::Destroying, "destroying"},
    {SandboxState::Clearing, "clearing"},
    {SandboxState::Failed, "failed"},
}};

}  // namespace

std::string_view state_name(SandboxState state) {
  for (const auto& [s, name] : kNames)
    if (s == state) return name;
  return "unknown";
}

SandboxState parse_state(std::string_view text) {
  for (const auto& [s, name] : kNames)
    if (name == text) return s;
  return SandboxState::Unknown;
}

}  // namespace agentbox::persistence
