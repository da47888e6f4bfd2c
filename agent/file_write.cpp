// file.write (files.h): whole files replaced atomically, or appended to; and
// the closing thread that keeps the last reference of a replaced file off
// the request path.
#include "agent/files.h"

#include "agent/base64.h"
#include "agent/file_io.h"
#include "agent/file_paths.h"
#include "os/unique_fd.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace agentbox::agent {

// Read at each call: a command running as the agent's user may lower it
// (prlimit --pid 1).
std::uint64_t max_file_bytes() {
  rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) return limit.rlim_cur;
  return UINT64_MAX;
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw file_error(errno, "cannot write", path);
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

namespace {

void fsync_directory(const std::string& dir) {
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

// 0666 less the agent's umask (set once at its start), read from
// /proc/self/status: umask(2) reads only by setting, and a change, even for
// an instant, would apply to files other threads create and to commands they
// spawn meanwhile.
mode_t default_file_mode() {
  static const mode_t mode = [] {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    std::string_view status(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    std::size_t at = status.find("\nUmask:");
    if (at == std::string_view::npos) return static_cast<mode_t>(0644);
    return static_cast<mode_t>(0666 & ~std::strtoul(buf + at + 7, nullptr, 8));
  }();
  return mode;
}

// A new file, written unnamed (O_TMPFILE) in its directory and linked in
// under its name once complete: a reader sees no file or all of it, and
// linkat fails with EEXIST if something took the name meanwhile. One
// directory entry instead of a temporary name plus a rename (~25 instead of
// ~40 µs here). False when this filesystem or sandbox cannot (no O_TMPFILE,
// no /proc) or when a file appeared and may be replaced: the caller then
// renames a named temporary file.
bool link_new_file(const std::string& dir, const std::string& target, std::string_view data, bool sync,
                   bool no_replace) {
  os::UniqueFd fd(open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666));  // the umask applies, as for any new file
  if (fd.get() < 0) return false;
  write_all(fd.get(), data, target);
  if (sync && fsync(fd.get()) != 0) throw file_error(errno, "cannot flush", target);
  std::string self = "/proc/self/fd/" + std::to_string(fd.get());
  if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, target.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    if (errno == EEXIST && no_replace) throw file_error(errno, "cannot create", target);
    return false;
  }
  if (sync) fsync_directory(dir);
  return true;
}

}  // namespace

// See file_io.h.
void replace_file(const std::string& target, std::string_view data, std::optional<mode_t> mode, bool sync,
                  bool no_replace) {
  std::string dir = target.substr(0, target.rfind('/'));
  if (dir.empty()) dir = "/";
  if (!mode && link_new_file(dir, target, data, sync, no_replace)) return;
  std::string temp = (dir == "/" ? "" : dir) + "/.agentbox-write-XXXXXX";
  int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) throw file_error(errno, "cannot create a temporary file in", dir);
  try {
    write_all(fd, data, target);
    if (fchmod(fd, mode ? *mode : default_file_mode()) != 0) throw file_error(errno, "cannot set the mode of", target);
    if (sync && fsync(fd) != 0) throw file_error(errno, "cannot flush", target);
    if (close(fd) != 0) {
      fd = -1;
      throw file_error(errno, "cannot write", target);
    }
    fd = -1;
    int rc = no_replace ? renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE)
                        : rename(temp.c_str(), target.c_str());
    if (rc != 0) throw file_error(errno, no_replace ? "cannot create" : "cannot replace", target);
  } catch (...) {
    if (fd >= 0) close(fd);
    unlink(temp.c_str());
    throw;
  }
  if (sync) fsync_directory(dir);
}

void make_parents(const std::string& target) {
  std::size_t slash = 0;
  while ((slash = target.find('/', slash + 1)) != std::string::npos) {
    std::string dir = target.substr(0, slash);
    if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) throw file_error(errno, "cannot create directory", dir);
  }
}

namespace {

// See close_after_reply in files.h. Per thread: the thread that served
// a request sends its reply and then hands what the request left here to
// the closer.
thread_local std::vector<int> t_close_after_reply;
constexpr std::size_t kMaxHeldFiles = 16;

// Closes descriptors on a thread of its own, started on first use and never
// stopped (the process's exit closes what is left). At most kMaxPending wait:
// beyond that the caller closes its own, so a disk slower than the writes
// holds up the writes instead of piling up descriptors. (Waking it per file
// measured better than batching or SCHED_IDLE, docs/files.md "Writing".)
class Closer {
 public:
  static Closer& instance() {
    static Closer* closer = new Closer;  // never destroyed: its thread may still run at exit
    return *closer;
  }

  void close_later(std::vector<int>& fds) {
    {
      std::lock_guard lock(mutex_);
      if (!started_) {
        // The sandbox's process limit may be used up by its commands: then
        // the writer closes its own, as when the queue is full.
        try {
          std::thread([this] { run(); }).detach();
          started_ = true;
        } catch (const std::system_error&) {
        }
      }
      if (started_ && pending_.size() + fds.size() <= kMaxPending) {
        pending_.insert(pending_.end(), fds.begin(), fds.end());
        fds.clear();
      }
    }
    if (fds.empty()) {
      ready_.notify_one();
      return;
    }
    for (int fd : fds) close(fd);
    fds.clear();
  }

 private:
  static constexpr std::size_t kMaxPending = 64;

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return !pending_.empty(); });
      std::vector<int> batch;
      batch.swap(pending_);
      lock.unlock();
      for (int fd : batch) close(fd);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<int> pending_;
  bool started_ = false;
};

}  // namespace

void close_after_reply(int fd) {
  if (fd < 0) return;
  if (t_close_after_reply.size() >= kMaxHeldFiles) {
    close(fd);
    return;
  }
  t_close_after_reply.push_back(fd);
}

void close_files_after_reply() {
  if (!t_close_after_reply.empty()) Closer::instance().close_later(t_close_after_reply);
}

json file_write(const json& params, const FileEnv& env) {
  std::string path = file_param_path(params, "path", env.cwd);
  if (!params.contains("content") || !params["content"].is_string())
    throw SandboxError(codes::kInvalidArguments, "content is required and must be a string");
  std::string encoding = param_string(params, "encoding", "utf-8");
  std::string mode = param_string(params, "mode", "overwrite");
  if (mode != "overwrite" && mode != "append" && mode != "create")
    throw SandboxError(codes::kInvalidArguments, "mode must be \"overwrite\", \"append\" or \"create\"");
  std::string decoded;
  const std::string* data = &params["content"].get_ref<const std::string&>();
  if (encoding == "base64") {
    auto bytes = base64_decode(*data);
    if (!bytes) throw SandboxError(codes::kInvalidArguments, "content is not valid base64");
    decoded = std::move(*bytes);
    data = &decoded;
  } else if (encoding != "utf-8") {
    throw SandboxError(codes::kInvalidArguments, "encoding must be \"utf-8\" or \"base64\"");
  }
  bool sync = params.value("sync", false);

  std::string target = writable_target(path);
  // Held (O_PATH: no access needed, a FIFO does not block) until the reply
  // is sent, so that a replaced file's blocks are freed after it.
  os::UniqueFd old(open(target.c_str(), O_PATH | O_CLOEXEC));
  struct stat st;
  // Any failure but ENOENT (EMFILE, say) is asked again without a
  // descriptor, as before: an existing file must not pass for a new one.
  bool exists = old.get() >= 0 ? fstat(old.get(), &st) == 0 : errno != ENOENT && stat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw SandboxError(codes::kIsDirectory, path + " is a directory");
  if (exists && mode == "create")
    throw SandboxError(codes::kFileExists, path + " already exists; use mode \"overwrite\" to replace it");
  if (exists && !S_ISREG(st.st_mode))
    throw SandboxError(codes::kInvalidArguments, path + " is not a regular file (a device, FIFO or socket)");
  // An atomic replace would succeed on a read-only file (only the directory
  // is written); refuse it as `echo > file` would.
  if (exists && access(target.c_str(), W_OK) != 0) throw file_error(errno, "cannot write", path);
  std::uint64_t final_size = data->size() + (mode == "append" && exists ? static_cast<std::uint64_t>(st.st_size) : 0);
  std::uint64_t max = max_file_bytes();
  if (final_size > max)
    throw SandboxError(codes::kFileTooLarge, path + " would be " + std::to_string(final_size) +
                                             " bytes; the sandbox's file size limit is " + std::to_string(max));
  if (!exists) {
    struct stat parent;
    if (stat(target.substr(0, target.rfind('/')).c_str(), &parent) != 0) make_parents(target);
  }

  if (mode == "append") {
    // Only an append can pass the size limit: the file may have grown since
    // the stat. A new file holds just `data`, checked above (should a command
    // lower the limit in between, the write fails with EFBIG: SIGXFSZ's
    // default action does not apply to the agent, its PID namespace's init
    // under bwrap --as-pid-1).
    BlockFileSizeSignal guard;
    // O_NONBLOCK: a FIFO swapped in since the stat must not hang the agent.
    os::UniqueFd fd(open(target.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666));
    if (fd.get() < 0) throw file_error(errno, "cannot open", path);
    write_all(fd.get(), *data, path);
    if (sync && fsync(fd.get()) != 0) throw file_error(errno, "cannot flush", path);
  } else {
    replace_file(target, *data, exists ? std::optional<mode_t>(st.st_mode & 07777) : std::nullopt, sync,
                 mode == "create");
    close_after_reply(old.release());
  }
  return {{"path", target}, {"bytes_written", data->size()}, {"size", final_size}, {"created", !exists}};
}

}  // namespace agentbox::agent
