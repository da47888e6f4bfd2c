// Loop devices and mount points for the disks of root servers (disk.h,
// disk_pool.h): a file attached to a loop device that frees itself when the
// mount on it goes, and the device that already backs a file.
#pragma once

#include <filesystem>
#include <string>

namespace agentbox::sandbox {

// Whether dir is the root of a filesystem other than its parent's.
bool is_mount_point(const std::filesystem::path& dir);

// Attaches image to a free loop device that frees itself when its last user
// (the mount) goes (LO_FLAGS_AUTOCLEAR); returns an open fd of the device.
int attach_loop(int image_fd, const std::filesystem::path& image, std::string& dev);

// The loop device that already backs `image`, if any: the filesystem of a
// sandbox whose box has not finished dying (its mount namespace still holds
// it after the host's mount is gone). Mounting that device again shares the
// live superblock; attaching a second device to the same file would mount
// one ext4 twice, and the two would overwrite each other.
std::string attached_loop(const std::filesystem::path& image);

// Mounts `image` (a filesystem in a file) on dir with the given type, flags
// and data, on the loop device that already backs it or a new one. Throws
// SandboxError(SANDBOX_START_FAILED).
void mount_file(const std::filesystem::path& image, const std::filesystem::path& dir, const char* type,
                unsigned long flags, const char* data);

}  // namespace agentbox::sandbox
