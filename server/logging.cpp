#include "server/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

namespace agentbox::server {

namespace {

class ClientSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set_forwarder(LogForwarder forwarder) {
    std::lock_guard lock(mutex_);
    forwarder_ = std::move(forwarder);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!forwarder_) return;
    // Guard against a forwarder that logs: that would recurse into this sink.
    static thread_local bool inside = false;
    if (inside) return;
    inside = true;
    forwarder_(msg.level, std::string(msg.logger_name.begin(), msg.logger_name.end()),
               std::string(msg.payload.begin(), msg.payload.end()));
    inside = false;
  }
  void flush_() override {}

 private:
  LogForwarder forwarder_;
};

std::shared_ptr<ClientSink> client_sink() {
  static auto sink = [] {
    auto s = std::make_shared<ClientSink>();
    s->set_level(spdlog::level::off);
    return s;
  }();
  return sink;
}

}  // namespace

void setup_logging(const std::string& level_name) {
  auto level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off")
    throw std::invalid_argument("unknown log level '" + level_name +
                                "' (use trace, debug, info, warn, error, critical or off)");
  auto stderr_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  stderr_sink->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] [%n] [%l] %v");

  auto main_logger = std::make_shared<spdlog::logger>(
      "agentbox", spdlog::sinks_init_list{stderr_sink, client_sink()});
  main_logger->set_level(spdlog::level::trace);  // each sink filters for itself
  stderr_sink->set_level(level);
  main_logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(main_logger);

  spdlog::drop("rpc");
  auto rpc_logger = std::make_shared<spdlog::logger>("rpc", stderr_sink);
  rpc_logger->set_level(spdlog::level::trace);
  spdlog::register_logger(rpc_logger);
}

void forward_logs_to_client(LogForwarder forwarder) { client_sink()->set_forwarder(std::move(forwarder)); }

void set_client_log_level(spdlog::level::level_enum level) { client_sink()->set_level(level); }

}  // namespace agentbox::server
