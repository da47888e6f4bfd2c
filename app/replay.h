// `agentbox replay FILE [-- SERVE_ARGS...]`: starts a fresh server with its own
// state directory, plays the transcript's input into it and checks every output
// against the transcript, reporting each difference.
#pragma once

#include <string>
#include <vector>

namespace agentbox::app {

// Returns 0 when the server behaved as recorded, 1 on differences, 2 on a
// usage or setup error.
int replay_main(const std::string& self, const std::vector<std::string>& args);

}  // namespace agentbox::app
