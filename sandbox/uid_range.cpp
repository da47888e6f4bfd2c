#include "sandbox/uid_range.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace agentbox::sandbox {

namespace {

using persistence::IdRange;

// The last id a range may hold: (uid_t)-1 means "no change" to chown and
// setresuid, and -2 is reserved by some tools too.
constexpr std::uint64_t kLastId = 4'294'967'293ull;

bool parse_u64(const std::string& text, std::uint64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// The colon-separated fields of each non-comment line of a file.
std::vector<std::vector<std::string>> read_entries(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream s(line);
    std::string field;
    while (std::getline(s, field, ':')) fields.push_back(field);
    out.push_back(std::move(fields));
  }
  return out;
}

struct SubordinateEntry {
  std::string owner;  // a user name or a numeric uid, as written
  std::uint64_t start = 0, count = 0;
};

std::vector<SubordinateEntry> read_subordinate(const std::string& path) {
  std::vector<SubordinateEntry> out;
  for (const auto& f : read_entries(path)) {
    SubordinateEntry e;
    if (f.size() >= 3 && parse_u64(f[1], e.start) && parse_u64(f[2], e.count)) {
      e.owner = f[0];
      out.push_back(e);
    }
  }
  return out;
}

std::optional<SubordinateEntry> entry_of(const std::vector<SubordinateEntry>& entries, const std::string& owner) {
  for (const auto& e : entries)
    if (e.owner == owner) return e;
  return std::nullopt;
}

bool overlaps(std::uint64_t a, std::uint64_t a_count, std::uint64_t b, std::uint64_t b_count) {
  return a < b + b_count && b < a + a_count;
}

std::string span(std::uint64_t start, std::uint64_t count) {
  return std::to_string(start) + "-" + std::to_string(start + count - 1);
}

// Host users (passwd) or groups (group) whose id, the third field, lies in [start, start + count).
void ids_inside(const std::string& path, const char* what, std::uint64_t start, std::uint64_t count,
                std::vector<std::string>& problems) {
  for (const auto& f : read_entries(path)) {
    std::uint64_t id = 0;
    if (f.size() >= 3 && parse_u64(f[2], id) && id >= start && id < start + count)
      problems.push_back(std::string(what) + " " + f[0] + " (" + std::to_string(id) + ", " + path + ") is inside it");
  }
}

void subordinate_overlaps(const std::string& path, std::uint64_t start, std::uint64_t count,
                          std::vector<std::string>& problems) {
  for (const auto& e : read_subordinate(path)) {
    if (e.owner != kRangeOwner && overlaps(start, count, e.start, e.count))
      problems.push_back("it overlaps " + e.owner + "'s subordinate ids " + span(e.start, e.count) + " in " + path);
  }
}

}  // namespace

IdRange parse_uid_range(const std::string& text) {
  auto colon = text.find(':');
  std::uint64_t start = 0, count = 0;
  if (colon == std::string::npos || !parse_u64(text.substr(0, colon), start) ||
      !parse_u64(text.substr(colon + 1), count))
    throw std::invalid_argument("--uid-range must be START:COUNT (e.g. 2000000000:65536), not '" + text + "'");
  if (count == 0 || start == 0 || start + count - 1 > kLastId)
    throw std::invalid_argument("--uid-range " + text + " must hold at least one id, not 0, and end below 4294967294");
  return {static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(count)};
}

ChosenRange default_uid_range(const HostIdFiles& files) {
  auto uids = entry_of(read_subordinate(files.subuid), kRangeOwner);
  auto gids = entry_of(read_subordinate(files.subgid), kRangeOwner);
  if (uids && gids && uids->count > 0 && gids->count > 0 && uids->start + uids->count - 1 <= kLastId &&
      gids->start + gids->count - 1 <= kLastId) {
    auto count = std::min(uids->count, gids->count);
    return {{static_cast<std::uint32_t>(uids->start), static_cast<std::uint32_t>(gids->start),
             static_cast<std::uint32_t>(count)},
            std::string("the ") + kRangeOwner + " entries of " + files.subuid + " and " + files.subgid};
  }
  return {{kDefaultUidStart, kDefaultUidStart, kDefaultUidCount}, "the default"};
}

std::vector<std::string> uid_range_problems(const IdRange& r, const HostIdFiles& files) {
  std::vector<std::string> problems;
  if (r.count == 0) return {"it is empty"};
  std::uint64_t low = std::min(r.uid_start, r.gid_start), high = std::max(r.uid_start, r.gid_start);
  if (low < 65536) problems.push_back("it starts below 65536, among the host's own users and nobody (65534)");
  if (high + r.count - 1 > kLastId) problems.push_back("it reaches past 4294967293");
  ids_inside(files.passwd, "host user", r.uid_start, r.count, problems);
  ids_inside(files.group, "host group", r.gid_start, r.count, problems);
  subordinate_overlaps(files.subuid, r.uid_start, r.count, problems);
  subordinate_overlaps(files.subgid, r.gid_start, r.count, problems);
  return problems;
}

std::string describe(const IdRange& r) {
  return "uids " + span(r.uid_start, r.count) + ", gids " + span(r.gid_start, r.count);
}

DoctorCheck check_uid_range(const std::optional<IdRange>& configured, const HostIdFiles& files) {
  using Level = DoctorCheck::Level;
  if (geteuid() != 0) {
    auto read = [](const char* path) {
      std::ifstream in(path);
      std::string v;
      in >> v;
      return v.empty() ? std::string("?") : v;
    };
    return {"sandbox uids", Level::Warn,
            "not root: every sandbox runs as this user (uid " + std::to_string(getuid()) +
                ") on the host, so all of them share its per-user kernel limits, with each other and with this "
                "user's own processes: inotify instances (fs.inotify.max_user_instances = " +
                read("/proc/sys/fs/inotify/max_user_instances") + ") and watches (max_user_watches = " +
                read("/proc/sys/fs/inotify/max_user_watches") +
                "), POSIX message queue bytes (RLIMIT_MSGQUEUE), pending signals (RLIMIT_SIGPENDING) and the "
                "RLIMIT_NPROC count; one sandbox can use one of them up for the others. A root server gives each "
                "sandbox a host uid of its own (--uid-range)"};
  }
  ChosenRange chosen = configured ? ChosenRange{*configured, "--uid-range"} : default_uid_range(files);
  std::string what = describe(chosen.range) + " (" + chosen.source + ")";
  auto problems = uid_range_problems(chosen.range, files);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    return {"sandbox uids", Level::Fail,
            what + " collides with the host: " + all + ". Give serve and doctor a free --uid-range START:COUNT, or "
                   "add a free range for a user named " + kRangeOwner + " to " + files.subuid + " and " + files.subgid};
  }
  std::string checked = ": no user in " + files.passwd + " or group in " + files.group + " inside it, no other "
                        "user's subordinate ids in " + files.subuid + " or " + files.subgid + " overlap it";
  if (chosen.range.count < 1024)
    return {"sandbox uids", Level::Warn,
            what + checked + "; but only " + std::to_string(chosen.range.count) + " ids: each sandbox of the state "
            "directory holds one until it is destroyed, and a new sandbox fails once all are held"};
  return {"sandbox uids", Level::Ok,
          what + checked + "; each sandbox runs as a host uid of its own (" + std::to_string(chosen.range.count) +
              " sandboxes at most per state directory)"};
}

}  // namespace agentbox::sandbox
