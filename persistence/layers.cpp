// Incremental snapshots inside the helper (layers.h).
#include "persistence/layers.h"

#include "os/errno_text.h"
#include "persistence/archive_local.h"
#include "persistence/archive_rules.h"
#include "persistence/tree_fs.h"

#include <archive_entry.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <thread>
#include <unistd.h>

namespace agentbox::persistence::layers {

namespace fs = std::filesystem;

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
constexpr std::size_t kStampBytes = 8 * 8;

void put64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The names in a directory (its descriptor is kept by the caller).
std::vector<std::string> names_in(int fd) {
  std::vector<std::string> names;
  int copy = dup(fd);
  DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
  if (!d) {
    if (copy >= 0) close(copy);
    return names;
  }
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

// Opens the directory `name` under `parent` when it is one (not a symlink),
// checking it is the inode fstatat saw.
int open_subdir(int parent, const std::string& name, const struct stat& seen) {
  int fd = openat(parent, name.c_str(), kDirFlags);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != seen.st_ino || st.st_dev != seen.st_dev) {
    close(fd);
    return -1;
  }
  return fd;
}

// Calls visit(parent_fd, name, path, stat) for each entry below `fd`, depth
// first, entering directories visit returns true for.
template <typename Visit>
void walk(int fd, const std::string& prefix, int depth, Visit&& visit) {
  for (const auto& name : names_in(fd)) {
    struct stat st;
    if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string path = prefix + "/" + name;
    if (!visit(fd, name, path, st) || !S_ISDIR(st.st_mode) || depth >= kMaxTreeDepth) continue;
    int child = open_subdir(fd, name, st);
    if (child < 0) continue;
    walk(child, path, depth + 1, visit);
    close(child);
  }
}

template <typename Visit>
void walk_tops(int root, const std::vector<std::string>& tops, Visit&& visit) {
  for (const auto& top : tops) {
    int fd = openat(root, top.c_str(), kDirFlags);
    if (fd < 0) continue;
    walk(fd, top, 1, visit);
    close(fd);
  }
}

}  // namespace

std::string read_meta(struct archive* in, struct archive_entry* entry) {
  const char* p = archive_entry_pathname(entry);
  std::string path = p ? p : "";
  la_int64_t size = archive_entry_size(entry);
  if ((path != kParentEntry && path != kPathsEntry) || archive_entry_filetype(entry) != AE_IFREG || size < 0 ||
      static_cast<std::uint64_t>(size) > kMaxPathsBytes)
    throw ArchiveError("entry '" + shorten_path(path) + "' is not one a snapshot holds");
  std::string text(static_cast<std::size_t>(size), '\0');
  la_ssize_t n = text.empty() ? 0 : archive_read_data(in, text.data(), text.size());
  if (n != static_cast<la_ssize_t>(text.size()))
    throw ArchiveError("corrupt archive at " + path + ": " + (n < 0 ? local::archive_message(in) : std::string("short")));
  if (path == kParentEntry) {
    bool id = text.size() <= 128;
    for (char c : text) id = id && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
    if (!id) throw ArchiveError("the archive's parent entry is not a snapshot id");
  }
  return text;
}

Stamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_ino),     static_cast<std::uint64_t>(st.st_size),
          static_cast<std::uint64_t>(st.st_mode),    static_cast<std::uint64_t>(st.st_nlink),
          st.st_mtim.tv_sec,                         st.st_mtim.tv_nsec,
          st.st_ctim.tv_sec,                         st.st_ctim.tv_nsec};
}

Instant Instant::racy_limit() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::int64_t ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec -
                    std::chrono::duration_cast<std::chrono::nanoseconds>(kRacyWindow).count();
  return {ns / 1'000'000'000, ns % 1'000'000'000};
}

Baseline Baseline::load(const fs::path& file, const std::string& snapshot_id) {
  Baseline b;
  int fd = open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return b;
  std::string text;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  std::string header = std::string(kBaselineMagic) + snapshot_id + "\n";
  if (text.compare(0, header.size(), header) != 0) return b;
  std::size_t pos = header.size();
  while (pos < text.size()) {
    std::size_t nul = text.find('\0', pos);
    if (nul == std::string::npos || nul + 1 + kStampBytes > text.size()) return Baseline{};  // damaged: none
    const char* p = text.data() + nul + 1;
    Stamp s{get64(p), get64(p + 8), get64(p + 16), get64(p + 24),
            static_cast<std::int64_t>(get64(p + 32)), static_cast<std::int64_t>(get64(p + 40)),
            static_cast<std::int64_t>(get64(p + 48)), static_cast<std::int64_t>(get64(p + 56))};
    b.stamps_.emplace(text.substr(pos, nul - pos), s);
    pos = nul + 1 + kStampBytes;
  }
  return b;
}

const Stamp* Baseline::find(const std::string& path) const {
  auto it = stamps_.find(path);
  return it == stamps_.end() ? nullptr : &it->second;
}

BaselineWriter::BaselineWriter(const fs::path& file, const std::string& snapshot_id, Instant racy)
    : file_(file), racy_(racy) {
  fd_ = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) throw ArchiveError(os::errno_text("cannot create " + file.string(), errno));
  buffer_ = std::string(kBaselineMagic) + snapshot_id + "\n";
}

BaselineWriter::~BaselineWriter() {
  if (fd_ >= 0) close(fd_);
}

void BaselineWriter::add(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return;
  Stamp s = stamp_of(st);
  if (racy_.at_or_before(s.ctime_s, s.ctime_ns)) s.ctime_s = -1;  // may change within its tick: never matches
  buffer_ += path;
  buffer_ += '\0';
  for (std::uint64_t v : {s.ino, s.size, s.mode, s.nlink, static_cast<std::uint64_t>(s.mtime_s),
                          static_cast<std::uint64_t>(s.mtime_ns), static_cast<std::uint64_t>(s.ctime_s),
                          static_cast<std::uint64_t>(s.ctime_ns)})
    put64(buffer_, v);
  if (buffer_.size() >= (1u << 20)) flush();
}

void BaselineWriter::flush() {
  const char* p = buffer_.data();
  std::size_t left = buffer_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ArchiveError(os::errno_text("cannot write " + file_.string(), errno));
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

// Not fsynced: whatever a crash leaves of it (nothing, zeros, an older one)
// matches no live file's inode and ctime, so it can only make the next
// snapshot store more.
void BaselineWriter::finish() { flush(); }

void PathList::add(char flag, const std::string& path) {
  text_ += flag;
  text_ += path;
  text_ += '\0';
  if (text_.size() > kMaxPathsBytes)
    throw ArchiveError("the workspace has too many entries for one snapshot's list of paths (over " +
                       std::to_string(kMaxPathsBytes >> 20) + " MiB of names); no snapshot was taken");
}

std::unordered_map<std::string, char> PathList::parse(const std::string& text) {
  std::unordered_map<std::string, char> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nul = text.find('\0', pos);
    char flag = text[pos];
    if (nul == std::string::npos || nul == pos + 1 || (flag != 'S' && flag != 'I'))
      throw ArchiveError("the snapshot's list of paths is malformed");
    out.emplace(text.substr(pos + 1, nul - pos - 1), flag);
    pos = nul + 1;
  }
  return out;
}

void make_dirs_writable(int root, const std::vector<std::string>& tops) {
  auto fix = [](int fd, mode_t mode) { fchmod(fd, (mode & 07777) | S_IRWXU); };
  for (const auto& top : tops) {
    int fd = openat(root, top.c_str(), kDirFlags);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0) fix(fd, st.st_mode);
    walk(fd, top, 1, [&](int parent, const std::string& name, const std::string&, const struct stat& s) {
      if (!S_ISDIR(s.st_mode) || (s.st_mode & S_IRWXU) == S_IRWXU) return S_ISDIR(s.st_mode);
      int child = open_subdir(parent, name, s);
      if (child >= 0) {
        fix(child, s.st_mode);
        close(child);
      }
      return true;
    });
    close(fd);
  }
}

void clear_dir_in_the_way(int parent_fd, const std::string& name) {
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    remove_tree_at(parent_fd, name);
}

void prune_to(int root, const std::vector<std::string>& tops, const std::unordered_map<std::string, char>& paths) {
  walk_tops(root, tops, [&](int parent, const std::string& name, const std::string& path, const struct stat&) {
    if (paths.count(path)) return true;
    if (auto ec = remove_tree_at(parent, name))
      throw ArchiveError("cannot remove " + path + ", which the snapshot no longer has: " + ec.message());
    return false;
  });
}

void fix_dirs(int root, std::vector<DirFix> fixes) {
  std::sort(fixes.begin(), fixes.end(), [](const DirFix& a, const DirFix& b) { return a.path > b.path; });
  for (const auto& f : fixes) {
    int fd = -1;
    std::size_t start = 0;
    while (start <= f.path.size()) {
      std::size_t end = f.path.find('/', start);
      if (end == std::string::npos) end = f.path.size();
      int next = openat(fd < 0 ? root : fd, f.path.substr(start, end - start).c_str(), kDirFlags);
      if (fd >= 0) close(fd);
      fd = next;
      if (fd < 0) break;
      start = end + 1;
    }
    if (fd < 0) continue;  // pruned, or not a directory: nothing to fix
    timespec times[2] = {{f.mtime_s, f.mtime_ns}, {f.mtime_s, f.mtime_ns}};
    futimens(fd, times);
    fchmod(fd, f.mode & 07777);
    close(fd);
  }
}

void write_tree_baseline(const fs::path& root, const std::vector<std::string>& tops, const fs::path& file,
                         const std::string& snapshot_id) {
  int fd = open(root.c_str(), kDirFlags);
  if (fd < 0) throw ArchiveError(os::errno_text("cannot open " + root.string(), errno));
  try {
    // Nothing writes these trees until they are swapped in, after this
    // call: once the racy window has passed the newest ctime, no later
    // write can share a file's timestamp tick. A small tree is walked
    // within the window after its extraction; waiting out the rest (at most
    // kRacyWindow) keeps every file of it inheritable, where stamping at
    // once recorded them all as racy and the next snapshot stored the
    // whole tree again.
    std::vector<std::pair<std::string, struct stat>> files;
    Instant newest;
    walk_tops(fd, tops, [&](int, const std::string&, const std::string& path, const struct stat& st) {
      if (!S_ISREG(st.st_mode)) return true;
      files.emplace_back(path, st);
      if (newest.at_or_before(st.st_ctim.tv_sec, st.st_ctim.tv_nsec)) newest = {st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
      return true;
    });
    for (int i = 0; i < 10 && Instant::racy_limit().at_or_before(newest.s, newest.ns); ++i)
      std::this_thread::sleep_for(kRacyWindow / 4);
    BaselineWriter writer(file, snapshot_id, Instant::racy_limit());
    for (const auto& [path, st] : files) writer.add(path, st);
    writer.finish();
  } catch (...) {
    close(fd);
    unlink(file.c_str());
    throw;
  }
  close(fd);
}

}  // namespace agentbox::persistence::layers
