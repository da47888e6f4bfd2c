#include "sandbox/parking.h"

#include "persistence/tree_fs.h"

#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::sandbox {

namespace fs = std::filesystem;

persistence::WarmRecord DriverParking::park(const std::string& sandbox, const persistence::SnapshotRecord& snapshot) {
  fs::path dir = layout_.sandbox(sandbox);
  if (!disk_usage(dir)) return dirs_.park(sandbox, snapshot);  // plain directories
  // No snapshot holds /tmp: emptied now (the idle thread), so the image
  // comes back holding exactly what the snapshot does.
  if (auto ec = persistence::remove_tree(dir / "tmp"))
    throw std::runtime_error("cannot empty " + (dir / "tmp").string() + ": " + ec.message());
  Disks::Parked parked = disks_.park(dir);
  persistence::WarmRecord record;
  record.sandbox = sandbox;
  record.snapshot = snapshot.id;
  record.bytes = parked.bytes;
  record.stamp = parked.stamp;
  return record;
}

std::string DriverParking::unpark(const persistence::WarmRecord& warm) {
  if (warm.stamp.rfind("image ", 0) != 0) return dirs_.unpark(warm);
  return disks_.unpark(layout_.sandbox(warm.sandbox), warm.stamp);
}

bool DriverParking::parked(const std::string& sandbox) const {
  return access(disks_.parked_image(layout_.sandbox(sandbox)).c_str(), F_OK) == 0 || dirs_.parked(sandbox);
}

void DriverParking::drop(const std::string& sandbox) noexcept {
  unlink(disks_.parked_image(layout_.sandbox(sandbox)).c_str());
  dirs_.drop(sandbox);
}

}  // namespace agentbox::sandbox
