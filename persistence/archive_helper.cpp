// agentbox-archive: the snapshot helper. The server (and `agentbox snapshot`)
// runs it once per archive operation (persistence/archive_client.cpp), so
// libarchive, its decoders and OpenSSL are never mapped into the server, and
// an untrusted archive is parsed in a process of its own.
//
//   agentbox-archive write   TEMP LEVEL THREADS ID PARENT BASELINE_IN BASELINE_OUT NAME DIR [NAME DIR]...
//   agentbox-archive extract DEST UID:GID MAX_BYTES BASELINE_OUT N (ARCHIVE DIGEST ID)×N TOP...
//   agentbox-archive merge   TEMP LEVEL THREADS NEW_PARENT ARCHIVE DIGEST ID ARCHIVE DIGEST ID
//   agentbox-archive verify  ARCHIVE
//   agentbox-archive digest  FILE
//   agentbox-archive s3 put|get|delete|check BUCKET [KEY [FILE [MAX_BYTES]]]
//                    (the snapshot store: s3_transfer.h; AWS_* from the environment)
//
// "-" stands for an empty value (no parent, no baseline, no owner, no digest).
//
// Reports are lines on stdout: "P <bytes> <files> [<total>]" while working,
// then one "OK ..." or "ERR <message>" line. The exit status is 0 after OK.
// The caller sets PR_SET_PDEATHSIG before exec: a server killed with -9
// takes its helper (and the helper's extracting child) with it.
#include "persistence/archive_local.h"
#include "persistence/s3_transfer.h"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sched.h>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace {

using namespace agentbox::persistence;

void say(const std::string& line) {
  std::string l = line;
  for (char& c : l) {
    if (c == '\n') c = ' ';
  }
  l += '\n';
  const char* p = l.data();
  std::size_t left = l.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);  // the caller is gone
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

std::string num(std::uint64_t v) { return std::to_string(v); }

bool write_file(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// A helper run by a server that is not root reads the workspace with the
// rights the box's owner has over it: in a user namespace of its own where it
// is root mapped to the user's uid, CAP_DAC_READ_SEARCH and CAP_DAC_OVERRIDE
// hold over the user's own files, so an entry the box made unreadable (chmod
// 000) is archived, modes unchanged (docs/design.md section 8, "Snapshots a box
// cannot hang or tear"). Without user namespaces it reads with the user's own
// rights, as before, and such an entry fails the snapshot with its name.
void gain_owner_rights() {
  if (geteuid() == 0) return;
  std::string uid = std::to_string(geteuid()), gid = std::to_string(getegid());
  if (unshare(CLONE_NEWUSER) != 0) return;
  write_file("/proc/self/setgroups", "deny");
  write_file("/proc/self/uid_map", "0 " + uid + " 1");
  write_file("/proc/self/gid_map", "0 " + gid + " 1");
}

std::string opt(const char* s) { return std::string(s) == "-" ? std::string() : std::string(s); }

std::string write_report(const WriteResult& r) {
  return "OK " + num(r.archive_bytes) + " " + num(r.input_bytes) + " " + num(r.files) + " " + num(r.skipped) + " " +
         r.digest + " " + num(r.stored);
}

std::uint64_t parse_u64(const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end) throw ArchiveError(std::string("bad number: ") + s);
  return v;
}

int usage() {
  say("ERR usage: agentbox-archive write|extract|merge|verify|digest|s3 ... (run by agentbox, not by hand)");
  return 2;
}

// Transfers for the snapshot store. get says "OK found <digest> <bytes>" or
// "OK missing".
int store(int argc, char** argv) {
  s3::Endpoint endpoint;
  if (std::string why = s3::endpoint_from_env(endpoint); !why.empty()) throw std::runtime_error(why);
  std::string op = argv[2], bucket = argv[3];
  if (op == "check" && argc == 4) {
    s3::check_bucket(endpoint, bucket);
  } else if (op == "put" && argc == 6) {
    s3::put_file(endpoint, bucket, argv[4], argv[5]);
  } else if (op == "delete" && argc == 5) {
    s3::remove(endpoint, bucket, argv[4]);
  } else if (op == "get" && argc == 7) {
    auto got = s3::get_file(endpoint, bucket, argv[4], argv[5], parse_u64(argv[6]));
    say(got.found ? "OK found " + got.digest + " " + num(got.bytes) : std::string("OK missing"));
    return 0;
  } else {
    return usage();
  }
  say("OK");
  return 0;
}

int run(int argc, char** argv) {
  std::string cmd = argv[1];
  if (cmd == "write" && argc >= 11 && (argc - 9) % 2 == 0) {
    gain_owner_rights();
    WriteOptions options;
    options.level = static_cast<int>(parse_u64(argv[3]));
    options.threads = static_cast<int>(parse_u64(argv[4]));
    options.snapshot_id = opt(argv[5]);
    options.parent = opt(argv[6]);
    options.baseline_in = opt(argv[7]);
    options.baseline_out = opt(argv[8]);
    options.progress = [](const ArchiveProgress& p) { say("P " + num(p.bytes) + " " + num(p.files)); };
    std::vector<ArchiveTree> trees;
    for (int i = 9; i + 1 < argc; i += 2) trees.push_back({argv[i], argv[i + 1]});
    say(write_report(local::write_archive_file(trees, argv[2], options)));
    return 0;
  }
  if (cmd == "extract" && argc >= 8) {
    ExtractOptions options;
    if (std::string owner = opt(argv[3]); !owner.empty()) {
      unsigned uid = 0, gid = 0;
      if (std::sscanf(owner.c_str(), "%u:%u", &uid, &gid) != 2) throw ArchiveError("bad owner: " + owner);
      options.owner = std::make_pair(uid, gid);
    }
    options.max_bytes = parse_u64(argv[4]);
    options.baseline_out = opt(argv[5]);
    std::uint64_t n = parse_u64(argv[6]);
    if (n == 0 || n > 4096 || 7 + 3 * n > static_cast<std::uint64_t>(argc)) return usage();
    std::vector<Layer> chain;
    for (std::uint64_t i = 0; i < n; ++i)
      chain.push_back({argv[7 + 3 * i], opt(argv[8 + 3 * i]), opt(argv[9 + 3 * i])});
    options.allowed_tops.assign(argv + 7 + 3 * n, argv + argc);
    options.progress = [](const ArchiveProgress& p) {
      say("P " + num(p.bytes) + " " + num(p.files) + " " + num(p.total_bytes.value_or(0)));
    };
    ExtractResult r = local::extract_layers(chain, argv[2], options);
    say("OK " + num(r.files) + " " + num(r.bytes) + " " + r.digest);
    return 0;
  }
  if (cmd == "merge" && argc == 12) {
    WriteOptions options;
    options.level = static_cast<int>(parse_u64(argv[3]));
    options.threads = static_cast<int>(parse_u64(argv[4]));
    Layer parent{argv[6], opt(argv[7]), opt(argv[8])};
    Layer child{argv[9], opt(argv[10]), opt(argv[11])};
    say(write_report(local::merge_archives_file(parent, child, opt(argv[5]), argv[2], options)));
    return 0;
  }
  if (cmd == "verify" && argc == 3) {
    ExtractResult r = local::verify_archive(argv[2]);
    say("OK " + num(r.files) + " " + num(r.bytes) + " " + r.digest + " " + (r.parent.empty() ? "-" : r.parent));
    return 0;
  }
  if (cmd == "digest" && argc == 3) {
    say("OK " + local::file_digest(argv[2]));
    return 0;
  }
  if (cmd == "s3" && argc >= 4) return store(argc, argv);
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  // Whatever the caller ignored: the extracting child is waited for.
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) return usage();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    say(std::string("ERR ") + e.what());
  } catch (...) {
    say("ERR unknown failure in agentbox-archive");
  }
  return 1;
}
