#pragma once
// Running a short helper program (mkfs.ext4, bwrap --version, doctor's
// probes) and keeping what it wrote to stderr for the message.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentbox::sandbox {

// Runs argv[0] (an absolute path) with stdin/stdout on /dev/null; returns its
// exit status (128+N for signal N, -1 when it could not be started) and puts
// its stderr, trailing newlines cut, in err_text. drop_to: the uid/gid the
// child switches to before exec (root only).
int run_capture(std::vector<std::string> argv, std::string& err_text,
                std::optional<std::pair<unsigned, unsigned>> drop_to = std::nullopt);

}  // namespace agentbox::sandbox
