// `agentbox snapshot list|show|restore|prune` and `agentbox sandbox
// list|destroy`: the state directory for a person at a terminal. Works on
// the catalog and archives directly (no server needed); a sandbox another
// process drives is refused rather than touched. Long operations draw a
// progress bar when stderr is a terminal.
#pragma once

#include <string>
#include <vector>

namespace agentbox::app {

// args: everything after "snapshot" / "sandbox"; must include --state-dir DIR.
int snapshot_main(const std::vector<std::string>& args);
int sandbox_cli_main(const std::vector<std::string>& args);

}  // namespace agentbox::app
