// Freezing one sandbox's processes where they stand with the cgroup freezer,
// and thawing them. cgroup v2: the sandbox's own group's cgroup.freeze.
// cgroup v1: the freezer is a hierarchy of its own, which sandbox groups do
// not join at start (a join costs ~10 ms on v1, paid by every start); the
// first freeze makes <freezer>/agentbox/sandbox-<id> and moves the sandbox's
// processes in (children follow their parent), then sets FROZEN.
//
// Caveat: on v1 a frozen process does not die of SIGKILL until thawed, so a
// box is thawed before it is stopped (bwrap_driver.cpp).
#pragma once

#include "sandbox/cgroups.h"
#include "sandbox/driver.h"

#include <filesystem>
#include <string>

namespace agentbox::sandbox {

class Freezer {
 public:
  // group: the sandbox's cgroup, or null when it has none; it outlives the freezer.
  Freezer(const CgroupSupport& support, const Cgroup* group, std::string name);
  ~Freezer();  // removes a v1 freezer group (its processes must be gone)
  Freezer(const Freezer&) = delete;
  Freezer& operator=(const Freezer&) = delete;

  FreezeResult freeze();
  FreezeResult thaw();
  bool frozen() const { return frozen_; }

 private:
  // Why this sandbox cannot be frozen here, or empty.
  std::string unsupported() const;
  FreezeResult set(bool freeze);

  CgroupSupport support_;  // a copy: the box need not outlive its driver
  const Cgroup* group_;
  std::string name_;
  std::filesystem::path v1_group_;  // made by the first v1 freeze
  bool frozen_ = false;
};

// Thaws a group a server that crashed mid-snapshot left frozen (v1
// freezer.state, v2 cgroup.freeze), so its processes can end and the group
// can go. True when it was frozen.
bool thaw_left_frozen(const std::filesystem::path& group);

// The v1 freezer parent of sandbox groups (<freezer>/<own>/agentbox), or
// empty where v1 has no freezer mounted.
std::filesystem::path v1_freezer_parent();

}  // namespace agentbox::sandbox
