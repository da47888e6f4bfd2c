// The parts of host /etc a box sees (docs/design.md section 2, "needed parts
// of /etc"): a fixed list of what the promised tools open, found by tracing
// bash, coreutils, git, python3, pip, perl, node, curl/openssl, gcc, man and
// locale in a box (strace -e trace=%file). Everything else in host /etc,
// /etc/shadow and /etc/gshadow included, is not there at all.
#pragma once

#include <string>
#include <vector>

namespace agentbox::sandbox {

// Whether the box gets host /etc/<name> (a top-level name, e.g. "hosts").
bool host_etc_binds(const std::string& name);

// Appends the bwrap arguments that bind the list from host_etc (normally
// "/etc") onto /etc: a symlink on the host stays a symlink (localtime, mtab),
// a file or directory is bound read-only with --ro-bind-try (a host that
// lacks one still starts boxes). Entries in `generated` are skipped: the plan
// binds its own (passwd, group, hostname, hosts).
void add_host_etc(std::vector<std::string>& argv, const std::vector<std::string>& generated,
                  const std::string& host_etc = "/etc");

}  // namespace agentbox::sandbox
