#include "app/state_commands.h"

#include "persistence/lifecycle.h"
#include "persistence/recovery.h"
#include "persistence/sandbox_lock.h"
#include "persistence/tree_fs.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::app {

// These commands work on the catalog and archives directly.
using namespace agentbox::persistence;

namespace fs = std::filesystem;

namespace {

constexpr const char* kSnapshotUsage =
    "usage: agentbox snapshot list [--conversation C]\n"
    "       agentbox snapshot show SNAPSHOT            details, and check the archive against its digest\n"
    "       agentbox snapshot restore SNAPSHOT [--to DIR]  into its sandbox (not running), or unpack into DIR\n"
    "       agentbox snapshot prune [--keep N]         keep the newest N unlabelled snapshots per sandbox (default 5)\n"
    "  all take --state-dir DIR\n";
constexpr const char* kSandboxUsage =
    "usage: agentbox sandbox list\n"
    "       agentbox sandbox destroy SANDBOX|--conversation C [--keep-snapshots]\n"
    "  all take --state-dir DIR\n";

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // --name value, or --flag ""
};

Args parse(const std::vector<std::string>& args) {
  Args out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      out.positional.push_back(a);
    } else if (auto eq = a.find('='); eq != std::string::npos) {
      out.options[a.substr(2, eq - 2)] = a.substr(eq + 1);
    } else if (a == "--keep-snapshots" || a == "--help") {
      out.options[a.substr(2)] = "";
    } else {
      if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
      out.options[a.substr(2)] = args[++i];
    }
  }
  return out;
}

std::string human(std::uint64_t bytes) {
  char buf[32];
  if (bytes >= (1u << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
  else if (bytes >= (1u << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  return buf;
}

// A progress bar on a terminal; nothing otherwise.
ArchiveProgressFn progress_bar(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return {};
  return [what](const ArchiveProgress& p) {
    if (p.total_bytes && *p.total_bytes > 0) {
      int pct = static_cast<int>(100.0 * static_cast<double>(p.bytes) / static_cast<double>(*p.total_bytes));
      std::string bar(static_cast<std::size_t>(pct / 4), '#');
      std::fprintf(stderr, "\r%s [%-25s] %3d%%  %llu entries", what.c_str(), bar.c_str(), pct,
                   static_cast<unsigned long long>(p.files));
    } else {
      std::fprintf(stderr, "\r%s %s  %llu entries", what.c_str(), human(p.bytes).c_str(),
                   static_cast<unsigned long long>(p.files));
    }
    std::fflush(stderr);
  };
}

void end_bar() {
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
}

struct State {
  StateLayout layout;
  std::unique_ptr<Catalog> catalog;
};

State open_state(const Args& args) {
  auto it = args.options.find("state-dir");
  if (it == args.options.end()) throw std::invalid_argument("--state-dir is required");
  State s;
  s.layout.root = it->second;
  if (!fs::exists(s.layout.catalog()))
    throw std::runtime_error("no catalog in " + it->second + " (is it an agentbox state directory?)");
  s.catalog = std::make_unique<Catalog>(s.layout.catalog());
  return s;
}

SnapshotRecord need_snapshot(Catalog& catalog, const Args& args) {
  if (args.positional.size() < 2) throw std::invalid_argument("name the snapshot (see agentbox snapshot list)");
  auto s = catalog.find_snapshot(args.positional[1]);
  if (!s) throw std::runtime_error("no snapshot " + args.positional[1]);
  return *s;
}

SandboxLock lock_or_fail(const StateLayout& layout, const std::string& sandbox) {
  SandboxLock lock;
  if (!SandboxLock::acquire(layout.lock(sandbox), std::chrono::milliseconds(0), lock))
    throw std::runtime_error("sandbox " + sandbox + " is being driven by a running agentbox server; stop it first");
  return lock;
}

int snapshot_list(State& st, const Args& args) {
  std::string sandbox;
  if (auto c = args.options.find("conversation"); c != args.options.end()) {
    auto sb = st.catalog->find_by_conversation(c->second);
    if (!sb) throw std::runtime_error("no conversation '" + c->second + "'");
    sandbox = sb->id;
  }
  std::map<std::string, std::string> conversations;
  for (const auto& sb : st.catalog->sandboxes()) conversations[sb.id] = sb.conversation;
  std::printf("%-18s %-13s %-20s %-25s %10s %8s  %s\n", "SNAPSHOT", "SANDBOX", "CONVERSATION", "CREATED", "SIZE",
              "ENTRIES", "LABEL/REASON");
  for (const auto& s : st.catalog->snapshots(sandbox)) {
    std::printf("%-18s %-13s %-20s %-25s %10s %8llu  %s\n", s.id.c_str(), s.sandbox.c_str(),
                conversations[s.sandbox].c_str(), s.created_at.c_str(), human(s.bytes).c_str(),
                static_cast<unsigned long long>(s.files), s.label.empty() ? s.reason.c_str() : ("'" + s.label + "'").c_str());
  }
  return 0;
}

int snapshot_show(State& st, const Args& args) {
  auto s = need_snapshot(*st.catalog, args);
  fs::path file = st.layout.root / s.path;
  std::printf("snapshot   %s\nsandbox    %s\ncreated    %s\nreason     %s\nlabel      %s\nfile       %s\n"
              "size       %s (%llu bytes)\nentries    %llu\ndigest     %s\n",
              s.id.c_str(), s.sandbox.c_str(), s.created_at.c_str(), s.reason.c_str(), s.label.c_str(),
              file.c_str(), human(s.bytes).c_str(), static_cast<unsigned long long>(s.bytes),
              static_cast<unsigned long long>(s.files), s.digest.c_str());
  auto r = verify_archive(file);
  bool ok = r.digest == s.digest;
  std::printf("check      %s (%llu entries, %s of file contents)\n", ok ? "ok: digest matches" : "DIGEST MISMATCH",
              static_cast<unsigned long long>(r.files), human(r.bytes).c_str());
  if (!s.parent.empty()) {
    SnapshotStore store(st.layout, *st.catalog);
    std::printf("builds on  %s (holds only the changes since it; %s to restore)\n", s.parent.c_str(),
                human(store.total_bytes(s)).c_str());
  }
  return ok ? 0 : 1;
}

// Who the restored files must belong to: as root, the sandbox's host ids
// as the catalog records them (docs/design.md section 8, "One host uid per
// sandbox"; files left root's would be read-only to the sandbox), else
// learned from the directories a server made, else 65534 (what sandboxes
// ran as before), then recorded as legacy ids so that the server keeps them
// while these files exist. Otherwise the caller, as for the server.
std::optional<std::pair<unsigned, unsigned>> sandbox_owner(Catalog& catalog, const StateLayout& layout,
                                                           const std::string& sandbox) {
  if (geteuid() != 0) return std::nullopt;
  if (auto ids = catalog.find_host_ids(sandbox)) return std::make_pair(ids->uid, ids->gid);
  fs::path dir = layout.sandbox(sandbox);
  std::pair<unsigned, unsigned> owner{kLegacySandboxId, kLegacySandboxId};
  for (const auto& path : {dir / "workspace", dir / "home", dir}) {
    struct stat s {};
    // lstat: a symlink planted there must not lend the restore its target's
    // owner (the extracting child would run as that uid; docs/design.md 2).
    if (lstat(path.c_str(), &s) == 0 && S_ISDIR(s.st_mode) && s.st_uid != 0) {
      owner = {s.st_uid, s.st_gid};
      break;
    }
  }
  catalog.keep_host_ids(sandbox, owner.first, owner.second);
  return owner;
}

int snapshot_restore(State& st, const Args& args) {
  auto s = need_snapshot(*st.catalog, args);
  if (auto to = args.options.find("to"); to != args.options.end()) {
    ExtractOptions options;
    options.progress = progress_bar("unpacking");
    SnapshotStore store(st.layout, *st.catalog);
    auto r = extract_layers(store.layers_of(s), to->second, options);  // its chain, when it is incremental
    end_bar();
    std::printf("unpacked %llu entries into %s\n", static_cast<unsigned long long>(r.files), to->second.c_str());
    return 0;
  }
  auto lock = lock_or_fail(st.layout, s.sandbox);
  auto before = st.catalog->find_sandbox(s.sandbox);
  if (!before)
    throw std::runtime_error("snapshot " + s.id + " belongs to sandbox " + s.sandbox +
                             ", which the catalog no longer has; unpack it with --to DIR");
  // The server's sequence (persistence/lifecycle.h). A failed restore
  // touches nothing live and puts back the state it found: not "stopped",
  // which would make the next server's recovery delete live directories
  // newer than any snapshot, then retry this archive.
  SnapshotStore store(st.layout, *st.catalog);
  Restore steps;
  steps.snapshot = &s;
  steps.owner = [&] { return sandbox_owner(*st.catalog, st.layout, s.sandbox); };
  steps.progress = progress_bar("restoring");
  steps.before = &*before;
  ParkedDirs parked(st.layout);  // a warm copy is used or dropped (a parked disk image: recovery drops it)
  steps.warm = &parked;
  restore(*st.catalog, store, steps);
  end_bar();
  activate(*st.catalog, s.sandbox, SandboxState::Restoring);
  std::printf("sandbox %s now holds snapshot %s; its next call starts on it\n", s.sandbox.c_str(), s.id.c_str());
  return 0;
}

int snapshot_prune(State& st, const Args& args) {
  std::size_t keep = 5;
  if (auto k = args.options.find("keep"); k != args.options.end()) keep = std::stoul(k->second);
  SnapshotStore store(st.layout, *st.catalog);
  std::size_t removed = 0;
  for (const auto& sb : st.catalog->sandboxes()) {
    for (const auto& s : store.prune(sb.id, keep)) {
      std::printf("removed %s (%s, %s)\n", s.id.c_str(), s.created_at.c_str(), human(s.bytes).c_str());
      ++removed;
    }
  }
  std::printf("%zu snapshot(s) removed; labelled ones and the newest %zu per sandbox kept\n", removed, keep);
  return 0;
}

std::uint64_t tree_bytes(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += it->file_size(ec);
  }
  return total;
}

struct ShownState {
  std::string state;
  std::string note;  // why a stored state is shown as another, when a person should know
};

// The state as the design's vocabulary names what runs (docs/design.md
// section 8), as sandbox_status reports it. The stored state says instead
// which copy is the truth for recovery (catalog.h): "active" stays stored
// for a workspace a server left on disk when it exited. A sandbox no server
// drives runs nothing, so it is stopped, whatever step a crash cut short.
ShownState shown_state(const SandboxRecord& sb, bool driven) {
  using enum SandboxState;
  if (driven) return {sb.state == None ? std::string(state_name(Starting)) : stored_state(sb), ""};
  if (sb.state == None) return {std::string(state_name(None)), ""};
  if (sb.state == Active || sb.state == Stopped) return {std::string(state_name(Stopped)), ""};
  return {std::string(state_name(Stopped)), "sandbox " + sb.id + ": a server ended while it was " + stored_state(sb) +
                         "; the next server to start on this state directory recovers it"};
}

int sandbox_list(State& st) {
  std::printf("%-13s %-24s %-12s %-8s %10s %9s\n", "SANDBOX", "CONVERSATION", "STATE", "SERVER", "LIVE", "SNAPSHOTS");
  std::vector<std::string> notes;
  for (const auto& sb : st.catalog->sandboxes()) {
    SandboxLock probe;
    bool driven = !SandboxLock::acquire(st.layout.lock(sb.id), std::chrono::milliseconds(0), probe);
    std::string server = driven ? (sb.owner_pid ? std::to_string(sb.owner_pid) : "yes") : "-";
    ShownState shown = shown_state(sb, driven);
    if (!shown.note.empty()) notes.push_back(shown.note);
    std::printf("%-13s %-24s %-12s %-8s %10s %9zu\n", sb.id.c_str(), sb.conversation.c_str(), shown.state.c_str(),
                server.c_str(), human(tree_bytes(st.layout.sandbox(sb.id) / "workspace")).c_str(),
                st.catalog->snapshots(sb.id).size());
  }
  for (const auto& note : notes) std::printf("\n%s", note.c_str());
  if (!notes.empty()) std::printf("\n");
  return 0;
}

int sandbox_destroy(State& st, const Args& args) {
  std::optional<SandboxRecord> sb;
  if (auto c = args.options.find("conversation"); c != args.options.end()) sb = st.catalog->find_by_conversation(c->second);
  else if (args.positional.size() >= 2) sb = st.catalog->find_sandbox(args.positional[1]);
  else throw std::invalid_argument("name the sandbox or --conversation");
  if (!sb) throw std::runtime_error("no such sandbox");
  auto lock = lock_or_fail(st.layout, sb->id);
  bool keep = args.options.count("keep-snapshots") > 0;
  // As the server's destroy (crash-ordered, docs/persistence.md "Destroy"):
  // the next sandbox starts empty, with neither the old sessions nor the
  // processes the last teardown ended.
  SnapshotStore store(st.layout, *st.catalog);
  destroy(*st.catalog, store, sb->id, keep);
  std::printf("destroyed sandbox %s (conversation '%s')%s\n", sb->id.c_str(), sb->conversation.c_str(),
              keep ? "; snapshots kept" : "");
  return 0;
}

}  // namespace

int snapshot_main(const std::vector<std::string>& raw) {
  Args args = parse(raw);
  if (args.positional.empty() || args.options.count("help")) {
    std::cout << kSnapshotUsage;
    return args.positional.empty() && !args.options.count("help") ? 2 : 0;
  }
  State st = open_state(args);
  const std::string& verb = args.positional[0];
  if (verb == "list") return snapshot_list(st, args);
  if (verb == "show") return snapshot_show(st, args);
  if (verb == "restore") return snapshot_restore(st, args);
  if (verb == "prune") return snapshot_prune(st, args);
  std::cerr << "unknown snapshot command '" << verb << "'\n" << kSnapshotUsage;
  return 2;
}

int sandbox_cli_main(const std::vector<std::string>& raw) {
  Args args = parse(raw);
  if (args.positional.empty() || args.options.count("help")) {
    std::cout << kSandboxUsage;
    return args.positional.empty() && !args.options.count("help") ? 2 : 0;
  }
  State st = open_state(args);
  const std::string& verb = args.positional[0];
  if (verb == "list") return sandbox_list(st);
  if (verb == "destroy") return sandbox_destroy(st, args);
  std::cerr << "unknown sandbox command '" << verb << "'\n" << kSandboxUsage;
  return 2;
}

}  // namespace agentbox::app
