// What a tree holds, entry by entry, for comparing a restore with what was
// archived (archive_test.cpp, incremental_test.cpp).
#pragma once

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::persistence::test {

namespace fs = std::filesystem;

inline void write_file(const fs::path& p, const std::string& content, mode_t mode = 0644) {
  std::ofstream(p, std::ios::binary) << content;
  chmod(p.c_str(), mode);
}

inline void set_mtime(const fs::path& p, long sec, long nsec) {
  timespec times[2] = {{sec, nsec}, {sec, nsec}};
  utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

struct Meta {
  mode_t mode;
  off_t size;
  long mtime_sec, mtime_nsec;
  std::string content;  // files: bytes; symlinks: target
  ino_t ino;
  nlink_t nlink;
  blkcnt_t blocks;
};

inline std::map<std::string, Meta> describe(const fs::path& root) {
  std::map<std::string, Meta> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    struct stat st;
    lstat(it->path().c_str(), &st);
    Meta m{st.st_mode, S_ISDIR(st.st_mode) ? 0 : st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, "", st.st_ino,
           st.st_nlink, st.st_blocks};
    if (S_ISREG(st.st_mode) && st.st_size < (1 << 20)) {
      std::ifstream in(it->path(), std::ios::binary);
      m.content.assign(std::istreambuf_iterator<char>(in), {});
    } else if (S_ISLNK(st.st_mode)) {
      m.content = fs::read_symlink(it->path()).string();
    }
    out[fs::relative(it->path(), root).string()] = m;
  }
  return out;
}

}  // namespace agentbox::persistence::test
