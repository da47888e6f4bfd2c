// Malicious and corrupt archives are refused with a clear error, and nothing
// is written outside the destination (which is removed).
#include "temp_dir.h"
#include "persistence/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

namespace {

fs::path temp_dir(const std::string& name) { return test::fresh_temp_dir("evil", name); }

struct EntrySpec {
  std::string path;
  mode_t type = AE_IFREG;
  std::string content;
  std::string symlink;
  std::string hardlink;
};

// Writes a zstd-compressed pax archive with exactly these entries.
void make_archive(const fs::path& file, const std::vector<EntrySpec>& entries) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_zstd(a);
  REQUIRE(archive_write_open_filename(a, file.c_str()) == ARCHIVE_OK);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_filetype(entry, e.type);
    archive_entry_set_perm(entry, 0644);
    if (!e.symlink.empty()) archive_entry_set_symlink(entry, e.symlink.c_str());
    if (!e.hardlink.empty()) archive_entry_set_hardlink(entry, e.hardlink.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(e.content.size()));
    archive_write_header(a, entry);
    if (!e.content.empty()) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// Compresses raw bytes (a hand-made tar stream) with zstd.
void make_raw(const fs::path& file, const std::string& bytes) {
  archive* a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_zstd(a);
  REQUIRE(archive_write_open_filename(a, file.c_str()) == ARCHIVE_OK);
  archive_entry* entry = archive_entry_new();
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_write_header(a, entry);
  archive_write_data(a, bytes.data(), bytes.size());
  archive_entry_free(entry);
  archive_write_close(a);
  archive_write_free(a);
}

// A 512-byte ustar header with a valid checksum.
std::string tar_header(const std::string& name, char type, const std::string& size_octal) {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<std::size_t>(name.size(), 100));
  std::memcpy(&h[100], "0000644", 7);
  std::memcpy(&h[108], "0000000", 7);
  std::memcpy(&h[116], "0000000", 7);
  std::memcpy(&h[124], size_octal.data(), std::min<std::size_t>(size_octal.size(), 11));
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = type;
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  std::memcpy(&h[148], chk, 7);
  return h;
}

// Runs an extraction that must fail; checks nothing appeared outside.
void expect_refused(const fs::path& dir, const fs::path& archive, const std::string& why,
                    const std::function<void()>& check_outside = {}) {
  auto before = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  try {
    extract_archive(archive, dir / "dest");
    FAIL("extraction of " << archive << " should have been refused");
  } catch (const ArchiveError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(why) != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "dest"));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == before);
  if (check_outside) check_outside();
}

}  // namespace

TEST_CASE("entries climbing out with .. are refused") {
  fs::path dir = temp_dir("dotdot");
  make_archive(dir / "a.tar.zst", {{"workspace/ok.txt", AE_IFREG, "fine"}, {"workspace/../../escape.txt", AE_IFREG, "evil"}});
  expect_refused(dir, dir / "a.tar.zst", "'..'", [&] {
    CHECK_FALSE(fs::exists(dir / "escape.txt"));
    CHECK_FALSE(fs::exists(dir.parent_path() / "escape.txt"));
  });
  fs::remove_all(dir);
}

TEST_CASE("absolute paths are refused") {
  fs::path dir = temp_dir("absolute");
  fs::path target = dir / "absolute-target.txt";
  make_archive(dir / "a.tar.zst", {{target.string(), AE_IFREG, "evil"}});
  expect_refused(dir, dir / "a.tar.zst", "absolute", [&] { CHECK_FALSE(fs::exists(target)); });
  fs::remove_all(dir);
}

TEST_CASE("a symlink followed by a write through it is refused") {
  fs::path dir = temp_dir("symlink");
  fs::create_directories(dir / "outside");
  make_archive(dir / "a.tar.zst", {{"workspace", AE_IFDIR},
                                    {"workspace/link", AE_IFLNK, "", (dir / "outside").string()},
                                    {"workspace/link/pwned", AE_IFREG, "evil"}});
  expect_refused(dir, dir / "a.tar.zst", "refused", [&] { CHECK(fs::is_empty(dir / "outside")); });
  make_archive(dir / "b.tar.zst", {{"workspace", AE_IFDIR},
                                    {"workspace/up", AE_IFLNK, "", "../../outside"},
                                    {"workspace/up/pwned", AE_IFREG, "evil"}});
  expect_refused(dir, dir / "b.tar.zst", "refused", [&] { CHECK(fs::is_empty(dir / "outside")); });
  fs::remove_all(dir);
}

TEST_CASE("hard links to paths outside are refused") {
  fs::path dir = temp_dir("hardlink");
  make_archive(dir / "a.tar.zst", {{"workspace/passwd", AE_IFREG, "", "", "/etc/passwd"}});
  expect_refused(dir, dir / "a.tar.zst", "hard link target");
  make_archive(dir / "b.tar.zst", {{"workspace/x", AE_IFREG, "", "", "workspace/../../x"}});
  expect_refused(dir, dir / "b.tar.zst", "hard link target");
  fs::remove_all(dir);
}

TEST_CASE("entries outside the expected trees and device nodes are refused") {
  fs::path dir = temp_dir("tops");
  make_archive(dir / "a.tar.zst", {{"etc/passwd", AE_IFREG, "root::0:0::/:/bin/sh\n"}});
  expect_refused(dir, dir / "a.tar.zst", "outside the expected directories");
  make_archive(dir / "b.tar.zst", {{"workspace/null", AE_IFCHR}});
  expect_refused(dir, dir / "b.tar.zst", "device or socket");
  fs::remove_all(dir);
}

TEST_CASE("a header claiming a huge size, a huge pax record, garbage and truncation are refused") {
  fs::path dir = temp_dir("huge");
  // 8 GiB claimed, no data behind it.
  make_raw(dir / "size.tar.zst", tar_header("workspace/huge", '0', "77777777777") + std::string(1024, '\0'));
  expect_refused(dir, dir / "size.tar.zst", "corrupt");
  // A pax extended header whose record claims an absurd length.
  std::string record = "99999999999999999999 path=workspace/x\n";
  char size[16];
  std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(record.size()));
  std::string pax = tar_header("PaxHeader/x", 'x', size) + record;
  pax.resize((pax.size() + 511) / 512 * 512, '\0');
  pax += tar_header("workspace/x", '0', "00000000000") + std::string(1024, '\0');
  make_raw(dir / "pax.tar.zst", pax);
  try {
    extract_archive(dir / "pax.tar.zst", dir / "dest");
    // libarchive may skip the bad record; then the entry must stay inside.
    CHECK(fs::exists(dir / "dest" / "workspace" / "x"));
    fs::remove_all(dir / "dest");
  } catch (const ArchiveError&) {
    CHECK_FALSE(fs::exists(dir / "dest"));
  }
  // A name longer than any path.
  make_archive(dir / "long.tar.zst", {{"workspace/" + std::string(5000, 'a'), AE_IFREG, "x"}});
  expect_refused(dir, dir / "long.tar.zst", "longer than");
  std::ofstream(dir / "garbage.tar.zst") << "this is not an archive at all";
  expect_refused(dir, dir / "garbage.tar.zst", "snapshot");
  make_archive(dir / "full.tar.zst", {{"workspace/f", AE_IFREG, std::string(200000, 'x')}});
  fs::resize_file(dir / "full.tar.zst", fs::file_size(dir / "full.tar.zst") / 2);
  expect_refused(dir, dir / "full.tar.zst", "cannot restore");
  fs::remove_all(dir);
}
