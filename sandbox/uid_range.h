// The host uids and gids a root server gives its sandboxes, one pair each
// (docs/design.md sections 2 and 8, "One host uid per sandbox"): a range
// reserved for agentbox the way /etc/subuid reserves subordinate ids. Parsed
// from `serve --uid-range START:COUNT`, else the /etc/subuid and /etc/subgid
// entries of a user named `agentbox`, else 2000000000:65536. Checked against
// the host's users, groups and other users' subordinate ids (serve refuses a
// range that collides; doctor says what it found). The allocation itself is
// the catalog's (persistence::Catalog::host_ids).
//
// Caveat: only the files are read, not NSS (LDAP or sssd users are not seen).
#pragma once

#include "persistence/catalog.h"
#include "sandbox/doctor_check.h"

#include <optional>
#include <string>
#include <vector>

namespace agentbox::sandbox {

// Where the host's ids are listed (injectable for tests).
struct HostIdFiles {
  std::string passwd = "/etc/passwd";
  std::string group = "/etc/group";
  std::string subuid = "/etc/subuid";
  std::string subgid = "/etc/subgid";
};

// Above systemd-nspawn's and systemd-homed's container ranges
// (524288-1879048191), far above the subordinate ids useradd hands out
// (from 100000, 65536 each), below 2^31 (some tools take uids as signed).
inline constexpr std::uint32_t kDefaultUidStart = 2'000'000'000;
inline constexpr std::uint32_t kDefaultUidCount = 65536;
// The user whose /etc/subuid and /etc/subgid entries are agentbox's range.
inline constexpr const char* kRangeOwner = "agentbox";

// "START:COUNT", the same numbers for uids and gids. Throws
// std::invalid_argument with a message for the user.
persistence::IdRange parse_uid_range(const std::string& text);

// The range serve uses without --uid-range, and where it came from.
struct ChosenRange {
  persistence::IdRange range;
  std::string source;  // "the agentbox entries of /etc/subuid and /etc/subgid" or "the default"
};
ChosenRange default_uid_range(const HostIdFiles& files = {});

// What collides with the range on this host: host users or groups inside
// it, other users' subordinate ids overlapping it, a range that reaches
// 65534 or past 2^32-2. Empty when none.
std::vector<std::string> uid_range_problems(const persistence::IdRange& range, const HostIdFiles& files = {});

// "uids 2000000000-2000065535, gids 2000000000-2000065535"
std::string describe(const persistence::IdRange& range);

// doctor's line: as root the range, where it came from and what collides;
// otherwise what the sandboxes of a normal user share.
DoctorCheck check_uid_range(const std::optional<persistence::IdRange>& configured, const HostIdFiles& files = {});

}  // namespace agentbox::sandbox
