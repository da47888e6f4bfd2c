// Merge on prune (archive.h, merge_archives; layers.h): a child archive with
// what it inherits from its parent folded in, so the parent can go. Runs in
// the helper. Both archives are ours (their digests are checked first), but
// their entries came from a box: the same path rules apply as on restore.
#include "os/errno_text.h"
#include "persistence/archive_local.h"
#include "persistence/archive_out.h"
#include "persistence/archive_rules.h"
#include "persistence/layers.h"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace agentbox::persistence::local {

namespace fs = std::filesystem;

namespace {

class In {
 public:
  explicit In(const Layer& layer) : path_(layer.archive) {
    std::string digest = file_digest(layer.archive);
    if (!layer.digest.empty() && digest != layer.digest)
      throw ArchiveError("digest mismatch: the catalog records " + layer.digest + " for " + path_.string() +
                         " but the file has " + digest + " (the archive was changed or damaged)");
    a_ = archive_read_new();
    archive_read_support_filter_zstd(a_);
    archive_read_support_format_tar(a_);
    archive_read_set_options(a_, "hdrcharset=BINARY");
    if (archive_read_open_filename(a_, path_.c_str(), 1 << 20) != ARCHIVE_OK)
      throw ArchiveError(error("not a snapshot archive"));
  }
  ~In() { archive_read_free(a_); }
  In(const In&) = delete;
  In& operator=(const In&) = delete;

  // The next entry, nullptr at the end.
  archive_entry* next() {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(a_, &e);
    if (rc == ARCHIVE_EOF) return nullptr;
    if (rc < ARCHIVE_WARN) throw ArchiveError(error("corrupt archive"));
    const char* p = archive_entry_pathname(e);
    if (!p) throw ArchiveError(error("an entry has no name"));
    if (!layers::is_meta(p))
      if (auto problem = entry_path_problem(p, {"workspace", "home"}); !problem.empty()) throw ArchiveError(problem);
    return e;
  }

  std::string text(archive_entry* e) { return layers::read_meta(a_, e); }

  // Copies the entry's header and data (holes as zeros: the pax writer drops
  // them again where the entry's sparse map says).
  std::uint64_t copy(archive_entry* e, ArchiveOut& out) {
    std::string path = archive_entry_pathname(e);
    out.header(e);
    la_int64_t size = archive_entry_size(e);
    if (archive_entry_hardlink(e) || size <= 0) return 0;
    static const std::vector<char> zeros(1 << 16);
    la_int64_t at = 0;
    auto fill = [&](la_int64_t to) {
      while (at < to) {
        std::size_t n = static_cast<std::size_t>(std::min<la_int64_t>(to - at, static_cast<la_int64_t>(zeros.size())));
        out.data(path, zeros.data(), n);
        at += static_cast<la_int64_t>(n);
      }
    };
    const void* block;
    size_t n;
    la_int64_t offset;
    int rc;
    while ((rc = archive_read_data_block(a_, &block, &n, &offset)) == ARCHIVE_OK) {
      if (offset < at) throw ArchiveError("corrupt archive at " + path + ": data out of order");
      fill(offset);
      out.data(path, block, n);
      at += static_cast<la_int64_t>(n);
    }
    if (rc != ARCHIVE_EOF) throw ArchiveError(error("corrupt archive at " + path));
    fill(size);
    return static_cast<std::uint64_t>(size);
  }

 private:
  std::string error(const std::string& what) {
    return what + " (" + path_.filename().string() + "): " + archive_message(a_);
  }
  fs::path path_;
  struct archive* a_ = nullptr;
};

struct Listing {
  std::string parent;
  std::unordered_map<std::string, char> paths;
};

bool is_dir(archive_entry* e) { return archive_entry_filetype(e) == AE_IFDIR && !archive_entry_hardlink(e); }

// The child's parent and paths, its directories copied to `out` on the way:
// they go first, so that the parent's files find their directories (one may
// have been a file in an older layer).
Listing list(const Layer& layer, ArchiveOut& out, WriteResult& result) {
  In in(layer);
  Listing l;
  bool has_paths = false;
  while (archive_entry* e = in.next()) {
    std::string_view p = archive_entry_pathname(e);
    if (layers::is_meta(p)) {
      std::string text = in.text(e);  // refuses any other name
      if (p == layers::kParentEntry) {
        l.parent = std::move(text);
      } else {
        l.paths = layers::PathList::parse(text);
        has_paths = true;
      }
    } else if (is_dir(e)) {
      in.copy(e, out);
      ++result.stored;
    }
  }
  if (!has_paths) throw ArchiveError(layer.archive.filename().string() + " has no list of its paths");
  return l;
}

}  // namespace

WriteResult merge_archives_file(const Layer& parent, const Layer& child, const std::string& new_parent,
                                const fs::path& temp, const WriteOptions& options) {
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw ArchiveError(os::errno_text("cannot create " + temp.string(), errno));
  WriteResult result;
  try {
    {
      ArchiveOut out(fd, options);
      out.meta(layers::kParentEntry, new_parent);
      Listing c = list(child, out, result);
      if (c.parent != parent.id)
        throw ArchiveError(child.archive.filename().string() + " holds the changes since '" + c.parent +
                           "', not since " + parent.id);
      In from_parent(parent);
      while (archive_entry* e = from_parent.next()) {
        std::string path = archive_entry_pathname(e);
        if (path == layers::kParentEntry) {
          if (from_parent.text(e) != new_parent)
            throw ArchiveError(parent.archive.filename().string() + " does not hold the changes since " +
                               (new_parent.empty() ? "nothing (it is not complete)" : new_parent));
          continue;
        }
        if (layers::is_meta(path)) continue;
        auto it = c.paths.find(path);
        // Only what the child inherits: its own entries come next.
        if (it == c.paths.end() || it->second != 'I' || archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e))
          continue;
        result.input_bytes += from_parent.copy(e, out);
        it->second = 'S';
        ++result.stored;
      }
      In from_child(child);
      while (archive_entry* e = from_child.next()) {
        if (layers::is_meta(archive_entry_pathname(e)) || is_dir(e)) continue;
        result.input_bytes += from_child.copy(e, out);
        ++result.stored;
      }
      layers::PathList merged;
      for (const auto& [path, flag] : c.paths) {
        if (flag == 'I' && new_parent.empty())
          throw ArchiveError(child.archive.filename().string() + " inherits " + shorten_path(path) + ", which " +
                             parent.archive.filename().string() + " does not hold");
        merged.add(flag, path);
      }
      out.meta(layers::kPathsEntry, merged.text());
      out.close();
      result.files = c.paths.size();
      result.archive_bytes = out.sink().written;
      result.digest = out.digest();
    }
    if (fsync(fd) != 0) throw ArchiveError(os::errno_text("cannot sync " + temp.string(), errno));
  } catch (...) {
    close(fd);
    unlink(temp.c_str());
    throw;
  }
  close(fd);
  return result;
}

}  // namespace agentbox::persistence::local
