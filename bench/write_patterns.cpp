// How the ways of writing a small file cost on this host's filesystem
// (docs/files.md, "Durability"): the file_write choices measured directly,
// without MCP or the agent. Each pattern writes a 100-byte file N times in a
// scratch directory; the patterns run interleaved, R rounds, best round each.
// Usage: write_patterns [DIR (default: a new dir under /tmp)] [N 2000] [R 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const char kBody[100] = {'x'};

int create(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, kBody, sizeof kBody) != static_cast<ssize_t>(sizeof kBody)) {
    std::perror(path.c_str());
    std::exit(1);
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "";
  if (dir.empty()) {
    char tmpl[] = "/tmp/write-patterns-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  std::string target = dir + "/same.txt";
  close(create(target));
  int counter = 0;
  auto temp = [&] { return dir + "/.tmp-" + std::to_string(counter++); };
  struct Pattern {
    const char* name;
    std::function<void()> once;
  };
  // The closing thread of file_write (agent/file_write.cpp, Closer): the
  // replaced file's last close, which frees its blocks, off the timed path.
  std::mutex mutex;
  std::condition_variable ready;
  std::vector<int> pending;
  std::thread([&] {
    std::unique_lock lock(mutex);
    for (;;) {
      ready.wait(lock, [&] { return !pending.empty(); });
      std::vector<int> batch;
      batch.swap(pending);
      lock.unlock();
      for (int fd : batch) close(fd);
      lock.lock();
    }
  }).detach();
  std::vector<Pattern> patterns = {
      {"new file in place (create, write, close; not atomic)", [&] { close(create(temp())); }},
      {"new file: temp + rename (file_write's fallback)", [&] {
         std::string t = temp();
         close(create(t));
         rename(t.c_str(), (t + ".new").c_str());
       }},
      {"new file: O_TMPFILE + linkat (file_write)", [&] {
         int fd = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
         if (fd < 0 || write(fd, kBody, sizeof kBody) != static_cast<ssize_t>(sizeof kBody)) {
           std::perror("O_TMPFILE");
           std::exit(1);
         }
         std::string self = "/proc/self/fd/" + std::to_string(fd);
         if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temp().c_str(), AT_SYMLINK_FOLLOW) != 0) std::perror("linkat");
         close(fd);
       }},
      {"overwrite: temp + rename, old file freed inline", [&] {
         std::string t = temp();
         close(create(t));
         rename(t.c_str(), target.c_str());
       }},
      {"overwrite: temp + rename, old freed on a thread (file_write)", [&] {
         int old = open(target.c_str(), O_PATH | O_CLOEXEC);
         std::string t = temp();
         close(create(t));
         rename(t.c_str(), target.c_str());
         {
           std::lock_guard lock(mutex);
           pending.push_back(old);
         }
         ready.notify_one();
       }},
      {"overwrite: temp + fdatasync + rename (sync: true)", [&] {
         std::string t = temp();
         int fd = create(t);
         fdatasync(fd);
         close(fd);
         rename(t.c_str(), target.c_str());
       }},
      {"overwrite: temp + RENAME_EXCHANGE + unlink (not used)", [&] {
         std::string t = temp();
         close(create(t));
         renameat2(AT_FDCWD, t.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE);
         unlink(t.c_str());
       }},
      {"overwrite in place: O_TRUNC + write (not atomic)", [&] {
         int fd = open(target.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
         (void)!write(fd, kBody, sizeof kBody);
         close(fd);
       }},
      {"read (open, read, close)", [&] {
         char buf[4096];
         int fd = open(target.c_str(), O_RDONLY | O_CLOEXEC);
         (void)!read(fd, buf, sizeof buf);
         close(fd);
       }},
  };
  std::vector<double> best(patterns.size(), 1e18);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      auto start = Clock::now();
      for (int i = 0; i < n; ++i) patterns[p].once();
      double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / n;
      best[p] = std::min(best[p], us);
    }
  }
  std::printf("%d writes of 100 bytes per pattern in %s, best of %d rounds:\n", n, dir.c_str(), rounds);
  for (std::size_t p = 0; p < patterns.size(); ++p) std::printf("  %-62s %8.1f us\n", patterns[p].name, best[p]);
  if (argc <= 1) std::filesystem::remove_all(dir);
  // Not a return: the closing thread still waits on the locals above.
  std::fflush(stdout);
  std::_Exit(0);
}
