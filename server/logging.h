// Logging: everything goes to stderr (stdout is reserved for protocol messages);
// server events at or above the level the host chose with logging/setLevel are
// also sent to it as notifications/message. Request logs ("rpc" logger) stay on
// stderr only.
#pragma once

#include <spdlog/common.h>

#include <functional>
#include <string>

namespace agentbox::server {

// Sets up the default logger ("agentbox") and the "rpc" logger on stderr.
// Throws std::invalid_argument for an unknown level name.
void setup_logging(const std::string& level);

// Forwards server events to the host. The level starts "off": hosts opt in
// with logging/setLevel.
using LogForwarder = std::function<void(spdlog::level::level_enum level, const std::string& logger,
                                        const std::string& text)>;
void forward_logs_to_client(LogForwarder forwarder);
void set_client_log_level(spdlog::level::level_enum level);

}  // namespace agentbox::server
