// Round trip of a workspace holding every kind of entry, compared byte for
// byte and metadata for metadata.
#include "temp_dir.h"
#include "tree_describe.h"
#include "persistence/archive.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fstream>
#include <map>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace agentbox::persistence;
using namespace agentbox::persistence::test;

namespace {

fs::path temp_dir(const std::string& name) { return test::fresh_temp_dir("persist", name); }

// A workspace with every kind of entry the issue names.
void populate(const fs::path& ws) {
  fs::create_directories(ws / "src" / "nested");
  write_file(ws / "src" / "main.py", "print('hello')\n");
  write_file(ws / "run.sh", "#!/bin/sh\necho run\n", 0755);
  write_file(ws / "readonly.txt", "ro", 0444);
  write_file(ws / "héllo wörld ✓.txt", "unicode name\n");
  fs::create_directories(ws / "日本語" / "ディレクトリ");
  write_file(ws / "日本語" / "ディレクトリ" / "ファイル", "deep unicode");
  fs::path deep = ws;
  for (int i = 0; i < 60; ++i) deep /= "d" + std::to_string(i);
  fs::create_directories(deep);
  write_file(deep / "bottom.txt", "deep\n");
  fs::create_directories(ws / "empty" / "also-empty");
  fs::create_symlink("src/main.py", ws / "link-inside");
  fs::create_symlink("../../nowhere/at/all", ws / "dangling");
  fs::create_symlink("/usr/bin/python3", ws / "absolute-link");
  fs::create_directory_symlink("src", ws / "dir-link");
  write_file(ws / "hard-a", "shared inode\n");
  fs::create_hard_link(ws / "hard-a", ws / "src" / "hard-b");
  fs::create_hard_link(ws / "hard-a", ws / "hard-c");
  mkfifo((ws / "fifo").c_str(), 0600);
  write_file(ws / "empty-file", "");
  std::string binary;
  for (int i = 0; i < 300000; ++i) binary += static_cast<char>((i * 7919) & 0xff);
  write_file(ws / "binary.bin", binary);
  // 1 GiB sparse file with data at both ends and in the middle.
  int fd = open((ws / "sparse.img").c_str(), O_WRONLY | O_CREAT, 0600);
  pwrite(fd, "start", 5, 0);
  pwrite(fd, "middle", 6, 512L << 20);
  ftruncate(fd, 1L << 30);
  close(fd);
  set_mtime(ws / "src" / "main.py", 1'500'000'000, 123'456'789);
  set_mtime(ws / "empty", 1'400'000'000, 5);
  set_mtime(ws / "link-inside", 1'300'000'000, 0);
  chmod((ws / "src" / "nested").c_str(), 0750);
}

}  // namespace

TEST_CASE("a workspace with every kind of entry round-trips byte for byte and metadata for metadata") {
  fs::path dir = temp_dir("roundtrip");
  fs::path ws = dir / "live" / "workspace", home = dir / "live" / "home";
  fs::create_directories(ws);
  fs::create_directories(home / ".config");
  write_file(home / ".bashrc", "alias ll='ls -l'\n");
  populate(ws);

  std::uint64_t progress_calls = 0;
  WriteOptions options;
  options.progress = [&](const ArchiveProgress&) { ++progress_calls; };
  auto written = write_archive({{"workspace", ws}, {"home", home}}, dir / "snap.tar.zst", options);
  CHECK(written.digest == file_digest(dir / "snap.tar.zst"));
  CHECK(written.archive_bytes == fs::file_size(dir / "snap.tar.zst"));
  CHECK(written.archive_bytes < 1 << 20);  // the 1 GiB hole is not stored
  CHECK(progress_calls > 0);
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().string().find(".tmp-") == std::string::npos);

  ExtractOptions extract;
  extract.expected_digest = written.digest;
  auto restored = extract_archive(dir / "snap.tar.zst", dir / "restored", extract);
  CHECK(restored.files == written.files);
  CHECK(restored.digest == written.digest);

  auto before = describe(dir / "live"), after = describe(dir / "restored");
  REQUIRE(before.size() == after.size());
  for (const auto& [path, m] : before) {
    INFO(path);
    REQUIRE(after.count(path));
    const Meta& r = after.at(path);
    CHECK(r.mode == m.mode);
    CHECK(r.size == m.size);
    CHECK(r.content == m.content);
    if (!S_ISLNK(m.mode)) {
      CHECK(r.mtime_sec == m.mtime_sec);
      CHECK(r.mtime_nsec == m.mtime_nsec);
    }
  }
  // Hard links stay one inode; the sparse file stays sparse.
  CHECK(after.at("workspace/hard-a").ino == after.at("workspace/src/hard-b").ino);
  CHECK(after.at("workspace/hard-a").ino == after.at("workspace/hard-c").ino);
  CHECK(after.at("workspace/hard-a").nlink == 3);
  CHECK(after.at("workspace/sparse.img").blocks * 512 < (16 << 20));
  std::ifstream sparse(dir / "restored" / "workspace" / "sparse.img", std::ios::binary);
  char buf[6];
  sparse.seekg(512L << 20);
  sparse.read(buf, 6);
  CHECK(std::string(buf, 6) == "middle");
  // No host ownership: files belong to whoever restored them.
  struct stat st;
  lstat((dir / "restored" / "workspace" / "run.sh").c_str(), &st);
  CHECK(st.st_uid == geteuid());
  fs::remove_all(dir);
}

TEST_CASE("verify_archive reads an archive through and reports what it holds") {
  fs::path dir = temp_dir("verify");
  fs::create_directories(dir / "ws" / "a");
  write_file(dir / "ws" / "a" / "f", "12345");
  auto written = write_archive({{"workspace", dir / "ws"}}, dir / "s.tar.zst");
  auto r = verify_archive(dir / "s.tar.zst");
  CHECK(r.files == 3);
  CHECK(r.bytes == 5);
  CHECK(r.digest == written.digest);
  fs::remove_all(dir);
}

TEST_CASE("a digest mismatch is refused and the destination is removed") {
  fs::path dir = temp_dir("digest");
  fs::create_directories(dir / "ws");
  write_file(dir / "ws" / "f", "x");
  write_archive({{"workspace", dir / "ws"}}, dir / "s.tar.zst");
  ExtractOptions options;
  options.expected_digest = "sha256:0000";
  CHECK_THROWS_WITH(extract_archive(dir / "s.tar.zst", dir / "out", options), Catch::Contains("digest mismatch"));
  CHECK_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

TEST_CASE("an archive damaged inside its compressed data is refused with a reason, not a crashed helper") {
  // Found with incremental snapshots: libarchive reports such damage with no
  // message, and the helper built its error from a null pointer (SIGSEGV).
  fs::path dir = temp_dir("damaged");
  fs::create_directories(dir / "ws");
  std::string noise(4000, '\0');
  std::uint32_t x = 7;
  for (int f = 0; f < 100; ++f) {
    for (auto& c : noise) x ^= x << 13, x ^= x >> 17, x ^= x << 5, c = static_cast<char>(x);
    write_file(dir / "ws" / ("f" + std::to_string(f)), noise);
  }
  write_archive({{"workspace", dir / "ws"}}, dir / "s.tar.zst");
  {
    std::fstream f(dir / "s.tar.zst", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("garbage", 7);
  }
  CHECK_THROWS_WITH(extract_archive(dir / "s.tar.zst", dir / "out"), Catch::Contains("corrupt archive"));
  CHECK_FALSE(fs::exists(dir / "out"));
  CHECK_THROWS_WITH(verify_archive(dir / "s.tar.zst"), Catch::Contains("corrupt") || Catch::Contains("Zstd"));
  fs::remove_all(dir);
}

TEST_CASE("a failed write leaves no file behind") {
  fs::path dir = temp_dir("failwrite");
  CHECK_THROWS_AS(write_archive({{"workspace", dir / "missing"}}, dir / "s.tar.zst"), ArchiveError);
  CHECK(fs::is_empty(dir));
  fs::remove_all(dir);
}
