// archive.h's functions, run in the snapshot helper (agentbox-archive, built
// next to agentbox): one process per operation, its reports read from a pipe.
// The server links no libarchive, no decoders, no OpenSSL (issue 6: they were
// ~4.5 MB of its RSS), and untrusted archives are parsed outside it.
//
// What stays here is the part of writing that orders the catalog: the helper
// writes and fsyncs the temporary file; this side runs the before_rename hook
// (the pending catalog row), renames and fsyncs the directory, exactly as the
// in-process code did (docs/persistence.md, "Durability").
//
// The helper gets PR_SET_PDEATHSIG(SIGKILL), set between fork and exec, so a
// server killed with -9 leaves no helper running: what it leaves is a .tmp-*
// archive or a .restore-* directory, which recovery removes as before.
#include "os/errno_text.h"
#include "persistence/archive.h"
#include "persistence/s3_store.h"
#include "persistence/child_lines.h"
#include "persistence/tree_fs.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agentbox::persistence {

namespace fs = std::filesystem;

namespace {

fs::path helper_path() {
  if (const char* env = std::getenv("AGENTBOX_ARCHIVE_HELPER"); env && *env) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::path(".") : self.parent_path()) / "agentbox-archive";
}

// One run of the helper. `on_progress` gets each "P ..." line's text after
// "P " (it may throw: the helper is killed first). Returns the text after
// "OK "; an "ERR" line becomes an ArchiveError with the helper's message.
// A helper still running after `timeout` is killed (SIGKILL; its extracting
// child has PR_SET_PDEATHSIG) and reaped, and the run fails: a box that
// stalls the helper never holds a server thread (docs/design.md section 8).
std::string run_helper(const std::vector<std::string>& args, const std::function<void(const char*)>& on_progress,
                       std::chrono::milliseconds timeout = kDefaultArchiveTimeout, int cancel_fd = -1) {
  fs::path helper = helper_path();
  if (access(helper.c_str(), X_OK) != 0)
    throw ArchiveError("the snapshot helper " + helper.string() +
                       " is missing (agentbox-archive is built and installed next to agentbox)");
  std::vector<std::string> strings{helper.string()};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw ArchiveError(os::errno_text("pipe", errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw ArchiveError(os::errno_text("cannot start the snapshot helper", err));
  }
  if (pid == 0) {
    // Async-signal-safe calls only: the server is threaded.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    if (fds[1] == STDOUT_FILENO) fcntl(fds[1], F_SETFD, 0);  // dup2 onto itself keeps O_CLOEXEC
    else if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(126);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0 && null != STDIN_FILENO) dup2(null, STDIN_FILENO);
    syscall(SYS_close_range, 3U, ~0U, 0U);  // nothing of the server's leaks in
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGCHLD, SIG_DFL);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  int status = 0;
  auto reap = [&] {
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  std::string final_line;
  try {
    final_line = read_child_lines(
        fds[0], on_progress,
        [](const std::string& line) { return line.rfind("OK", 0) == 0 || line.rfind("ERR ", 0) == 0; },
        std::chrono::steady_clock::now() + timeout, cancel_fd);
  } catch (const ChildCancelled&) {
    kill(pid, SIGKILL);
    reap();
    throw ArchiveError("the snapshot helper was stopped: the server is shutting down");
  } catch (const ChildTimeout&) {
    kill(pid, SIGKILL);
    reap();
    throw ArchiveError("the snapshot helper did not finish within " + std::to_string(timeout.count()) +
                       " ms (--snapshot-timeout) and was stopped; nothing was changed");
  } catch (...) {  // a progress callback threw
    kill(pid, SIGKILL);
    reap();
    throw;
  }
  reap();
  if (final_line.rfind("ERR ", 0) == 0) throw ArchiveError(final_line.substr(4));
  if (final_line.rfind("OK", 0) != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (WIFSIGNALED(status))
      throw ArchiveError("the snapshot helper died of signal " + std::to_string(WTERMSIG(status)));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) throw ArchiveError("cannot run " + helper.string());
    throw ArchiveError("the snapshot helper failed (exit status " + std::to_string(WEXITSTATUS(status)) + ")");
  }
  return final_line.size() > 3 ? final_line.substr(3) : std::string();
}

std::string temp_suffix() {
  std::random_device rd;
  return ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
}

void fsync_dir(const fs::path& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw ArchiveError(os::errno_text("cannot open " + dir.string(), errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) throw ArchiveError(os::errno_text("cannot sync " + dir.string(), err));
}

// How the helper's command line says "none" (archive_helper.cpp).
std::string or_dash(const std::string& v) { return v.empty() ? std::string("-") : v; }

WriteResult parse_write(const std::string& ok) {
  WriteResult result;
  unsigned long long archive_bytes = 0, input_bytes = 0, files = 0, skipped = 0, stored = 0;
  char digest[128] = {0};
  if (std::sscanf(ok.c_str(), "%llu %llu %llu %llu %127s %llu", &archive_bytes, &input_bytes, &files, &skipped, digest,
                  &stored) != 6)
    throw ArchiveError("the snapshot helper gave an unreadable report: " + ok);
  result.archive_bytes = archive_bytes;
  result.input_bytes = input_bytes;
  result.files = files;
  result.skipped = skipped;
  result.digest = digest;
  result.stored = stored;
  return result;
}

// Renames a finished temporary file into place and makes the rename durable.
void commit(const fs::path& temp, const fs::path& dest) {
  if (rename(temp.c_str(), dest.c_str()) != 0) throw ArchiveError(os::errno_text("cannot rename " + temp.string(), errno));
  fsync_dir(dest.parent_path());
}

ExtractResult parse_extract(const std::string& ok) {
  ExtractResult r;
  unsigned long long files = 0, bytes = 0;
  char digest[128] = {0}, parent[160] = {0};
  int got = std::sscanf(ok.c_str(), "%llu %llu %127s %159s", &files, &bytes, digest, parent);
  if (got < 2) throw ArchiveError("the snapshot helper gave an unreadable report: " + ok);
  r.files = files;
  r.bytes = bytes;
  r.digest = digest;
  if (got == 4 && std::string(parent) != "-") r.parent = parent;
  return r;
}

}  // namespace

WriteResult write_archive(const std::vector<ArchiveTree>& trees, const fs::path& dest, const WriteOptions& options,
                          const WriteHooks& hooks) {
  fs::path temp = dest;
  temp += temp_suffix();
  std::vector<std::string> args{"write",
                                temp.string(),
                                std::to_string(options.level),
                                std::to_string(options.threads),
                                or_dash(options.snapshot_id),
                                or_dash(options.parent),
                                or_dash(options.baseline_in.string()),
                                or_dash(options.baseline_out.string())};
  for (const auto& t : trees) {
    args.push_back(t.name);
    args.push_back(t.dir.string());
  }
  try {
    std::string ok = run_helper(args, [&](const char* p) {
      if (!options.progress) return;
      unsigned long long bytes = 0, files = 0;
      std::sscanf(p, "%llu %llu", &bytes, &files);
      options.progress({bytes, files, std::nullopt});
    }, options.timeout);
    WriteResult result = parse_write(ok);
    if (hooks.before_rename) hooks.before_rename(result);
    commit(temp, dest);
    if (options.progress) options.progress({result.input_bytes, result.files, std::nullopt});
    return result;
  } catch (...) {
    unlink(temp.c_str());  // the helper removes it on its own failures, not when killed
    throw;
  }
}

ExtractResult extract_layers(const std::vector<Layer>& layers, const fs::path& dest, const ExtractOptions& options) {
  // The helper refuses an existing destination too; checked here so that
  // cleaning up after a helper that died never removes what was there before.
  struct stat st;
  if (lstat(dest.c_str(), &st) == 0) throw ArchiveError(os::errno_text("cannot create " + dest.string(), EEXIST));
  std::string owner;
  if (options.owner) owner = std::to_string(options.owner->first) + ":" + std::to_string(options.owner->second);
  std::vector<std::string> args{"extract", dest.string(), or_dash(owner), std::to_string(options.max_bytes),
                                or_dash(options.baseline_out.string()), std::to_string(layers.size())};
  for (const auto& l : layers) {
    args.push_back(l.archive.string());
    args.push_back(or_dash(l.digest));
    args.push_back(or_dash(l.id));
  }
  args.insert(args.end(), options.allowed_tops.begin(), options.allowed_tops.end());
  try {
    return parse_extract(run_helper(args, [&](const char* p) {
      if (!options.progress) return;
      unsigned long long bytes = 0, files = 0, total = 0;
      std::sscanf(p, "%llu %llu %llu", &bytes, &files, &total);
      options.progress({bytes, files, total});
    }, options.timeout));
  } catch (...) {
    remove_tree(dest);  // the helper does this itself unless it was killed; box-written (tree_fs.h)
    if (!options.baseline_out.empty()) unlink(options.baseline_out.c_str());
    throw;
  }
}

ExtractResult extract_archive(const fs::path& archive, const fs::path& dest, const ExtractOptions& options) {
  return extract_layers({{archive, options.expected_digest, ""}}, dest, options);
}

WriteResult merge_archives(const Layer& parent, const Layer& child, const std::string& new_parent, const fs::path& dest,
                           const WriteOptions& options) {
  fs::path temp = dest;
  temp += temp_suffix();
  std::vector<std::string> args{"merge", temp.string(), std::to_string(options.level), std::to_string(options.threads),
                                or_dash(new_parent), parent.archive.string(), or_dash(parent.digest), or_dash(parent.id),
                                child.archive.string(), or_dash(child.digest), or_dash(child.id)};
  try {
    WriteResult result = parse_write(run_helper(args, {}, options.timeout));
    commit(temp, dest);
    return result;
  } catch (...) {
    unlink(temp.c_str());
    throw;
  }
}

ExtractResult verify_archive(const fs::path& archive) { return parse_extract(run_helper({"verify", archive.string()}, {})); }

std::string file_digest(const fs::path& file) { return run_helper({"digest", file.string()}, {}); }

std::string run_archive_helper(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                               int cancel_fd) {
  return run_helper(args, {}, timeout, cancel_fd);
}

}  // namespace agentbox::persistence
