// Where the bwrap driver parks a stopped sandbox's warm copy
// (persistence/warm.h; docs/design.md section 9, "Warm restore"): a sandbox
// with its own filesystem parks the whole disk image, unmounted
// (Disks::park: <state>/disks/<id>.warm), after emptying its /tmp; one with
// plain directories parks its workspace and home beside them
// (persistence::ParkedDirs).
#pragma once

#include "persistence/warm.h"
#include "sandbox/disk.h"

namespace agentbox::sandbox {

class DriverParking final : public persistence::ParkedStorage {
 public:
  DriverParking(const persistence::StateLayout& layout, const Disks& disks) : layout_(layout), disks_(disks), dirs_(layout) {}

  persistence::WarmRecord park(const std::string& sandbox, const persistence::SnapshotRecord& snapshot) override;
  std::string unpark(const persistence::WarmRecord& warm) override;
  bool parked(const std::string& sandbox) const override;
  void drop(const std::string& sandbox) noexcept override;

 private:
  const persistence::StateLayout& layout_;
  const Disks& disks_;
  persistence::ParkedDirs dirs_;
};

}  // namespace agentbox::sandbox
