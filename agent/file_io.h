// Helpers the file operations share (file_read.cpp, file_write.cpp,
// file_edit.cpp); internal to agent/.
#pragma once

#include "contract/errors.h"

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <sys/types.h>

namespace agentbox::agent {

// RLIMIT_FSIZE raises SIGXFSZ, whose default action would end the agent.
// Blocked in the writing thread, the write fails with EFBIG instead; the
// pending signal is consumed before the mask is restored, since a pooled
// thread must not carry it into a command it spawns.
class BlockFileSizeSignal {
 public:
  BlockFileSizeSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockFileSizeSignal() {
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_, old_;
};

// The file size limit (RLIMIT_FSIZE), UINT64_MAX when none.
std::uint64_t max_file_bytes();

// Up to n bytes from offset. The buffer starts at what the file holds (n is
// often a 1 MiB page limit over a 100-byte file: zero-filling and faulting in
// a megabyte per read cost more than the read) and grows for files whose
// size says nothing, such as those in /proc.
std::string pread_some(int fd, std::uint64_t offset, std::size_t n, const std::string& path);

// Writes all of data to fd; a failure is a SandboxError naming path.
void write_all(int fd, std::string_view data, const std::string& path);

// Opens a regular file for reading; directories and devices are refused with
// a code that says what they are.
int open_regular(const std::string& path, struct stat& st);

// BINARY_FILE for path, with what the file seems to be.
SandboxError binary_error(const std::string& path, std::uint64_t size, std::string_view head);

// Writes data to a new temporary file next to target and renames it into
// place: a reader sees the old file or the new one, never a part. With
// no_replace the rename fails if target exists (file_write mode "create").
// `mode` is the replaced file's; none for a new file. A file that was not
// there is linked in from an unnamed file instead (link_new_file).
// A plain rename over the old file, not renameat2(RENAME_EXCHANGE): ext4's
// auto_da_alloc starts writeback of a file renamed over another, which is
// what keeps the old or the new content after a crash without an fsync. It
// costs ~40 µs per overwrite on this host's virtual disk (docs/files.md,
// "Durability"); the exchange would skip it and lose that guarantee.
void replace_file(const std::string& target, std::string_view data, std::optional<mode_t> mode, bool sync,
                  bool no_replace);

}  // namespace agentbox::agent
