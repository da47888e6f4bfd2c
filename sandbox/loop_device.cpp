#include "sandbox/loop_device.h"

#include "contract/errors.h"
#include "os/errno_text.h"

#include <fstream>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef LOOP_CONFIGURE
#define LOOP_CONFIGURE 0x4C0A
struct loop_config {
  __u32 fd;
  __u32 block_size;
  struct loop_info64 info;
  __u64 __reserved[8];
};
#endif

namespace agentbox::sandbox {

namespace fs = std::filesystem;

namespace {

SandboxError disk_error(const std::string& what, int err) {
  return SandboxError(codes::kSandboxStartFailed, os::errno_text(what, err));
}

}  // namespace

bool is_mount_point(const fs::path& dir) {
  struct stat here{}, parent{};
  if (lstat(dir.c_str(), &here) != 0 || !S_ISDIR(here.st_mode)) return false;
  if (stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return here.st_dev != parent.st_dev;
}

// Attaches image to a free loop device that frees itself when its last user
// (the mount) goes (LO_FLAGS_AUTOCLEAR); returns an open fd of the device.
int attach_loop(int image_fd, const fs::path& image, std::string& dev) {
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) throw disk_error("cannot open /dev/loop-control", errno);
  for (int attempt = 0; attempt < 32; ++attempt) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) {
      int err = errno;
      close(ctl);
      throw disk_error("no free loop device", err);
    }
    dev = "/dev/loop" + std::to_string(n);
    int loop = open(dev.c_str(), O_RDWR | O_CLOEXEC);
    if (loop < 0) continue;  // taken and gone meanwhile, or its node not made yet
    loop_config config{};
    config.fd = static_cast<__u32>(image_fd);
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
    if (ioctl(loop, LOOP_CONFIGURE, &config) == 0) {
      close(ctl);
      return loop;
    }
    if (errno == EINVAL || errno == ENOTTY) {  // a kernel before 5.8: the two-step form
      if (ioctl(loop, LOOP_SET_FD, image_fd) == 0) {
        if (ioctl(loop, LOOP_SET_STATUS64, &config.info) == 0) {
          close(ctl);
          return loop;
        }
        ioctl(loop, LOOP_CLR_FD, 0);
      }
    }
    int err = errno;
    close(loop);
    if (err != EBUSY) {
      close(ctl);
      throw disk_error("cannot attach " + image.string() + " to " + dev, err);
    }
    // EBUSY: another mount took that device between the two calls.
  }
  close(ctl);
  throw disk_error("no free loop device after 32 tries", EBUSY);
}

// The loop device that already backs `image`, if any: the filesystem of a
// sandbox whose box has not finished dying (its mount namespace still holds
// it after the host's mount is gone). Mounting that device again shares the
// live superblock; attaching a second device to the same file would mount
// one ext4 twice, and the two would overwrite each other.
std::string attached_loop(const fs::path& image) {
  struct stat want {};
  if (stat(image.c_str(), &want) != 0) return "";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("loop", 0) != 0) continue;
    std::ifstream in(e.path() / "loop" / "backing_file");
    std::string backing;
    if (!std::getline(in, backing) || backing.empty()) continue;
    struct stat have {};
    if (stat(backing.c_str(), &have) == 0 && have.st_dev == want.st_dev && have.st_ino == want.st_ino)
      return "/dev/" + name;
  }
  return "";
}

void mount_file(const fs::path& image, const fs::path& dir, const char* type, unsigned long flags, const char* data) {
  std::string dev = attached_loop(image);
  int loop = dev.empty() ? -1 : open(dev.c_str(), O_RDWR | O_CLOEXEC);
  if (loop < 0) {
    int fd = open(image.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw disk_error("cannot open the disk image " + image.string(), errno);
    try {
      loop = attach_loop(fd, image, dev);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
  }
  int rc = mount(dev.c_str(), dir.c_str(), type, flags, data);
  int err = errno;
  close(loop);  // the mount holds the device now; autoclear frees it at unmount
  if (rc != 0) throw disk_error("cannot mount " + image.string() + " on " + dir.string(), err);
}

}  // namespace agentbox::sandbox
