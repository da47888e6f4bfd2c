// The stdio transport: the only code that touches the server's stdin and stdout.
// stdout carries protocol messages and nothing else; every message in and out
// can be copied to a transcript (--record).
#pragma once

#include "rpc/framing.h"
#include "server/dispatcher.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace agentbox::server {

// Writes a JSON-lines transcript: {"in": message} / {"out": message}, and
// {"in_raw": text} for input that was not JSON. The same format the replay
// runner reads.
class Recorder {
 public:
  explicit Recorder(const std::string& path);  // throws std::runtime_error
  void incoming(const std::string& line);
  void oversized(std::size_t bytes);
  void outgoing(const json& message);

 private:
  void write(const json& entry);
  std::mutex mutex_;
  std::ofstream out_;
};

class StdioTransport : public Output {
 public:
  // spin: how long the reader polls stdin without sleeping in a burst of
  // requests before it blocks (0 = never; see InputWaiter in transport.cpp).
  StdioTransport(int in_fd, int out_fd, std::size_t max_line_bytes, Recorder* recorder,
                 std::chrono::microseconds spin = std::chrono::microseconds(0));
  ~StdioTransport() override;

  void send(const json& message) override;
  void send_serialized(const json& message, std::string_view line) override;
  std::uint64_t written() const override;
  std::optional<bool> read_up_to(std::uint64_t mark) const override;

  // Reads lines until end of input or stop(), handing each to the dispatcher.
  void run(Dispatcher& dispatcher);
  // Makes run() return soon, from any thread (async-signal-safe).
  void stop();

 private:
  int in_fd_;
  std::size_t max_line_;
  std::chrono::microseconds spin_;
  rpc::LineWriter writer_;
  int out_fd_;
  // How the host's reading can be seen: bytes it has not read yet are
  // FIONREAD on a pipe, SIOCOUTQ on a socket (Node's child stdio is a socket pair).
  enum class Unread { Unknown, Pipe, Socket } unread_;
  std::mutex write_mutex_;  // orders written_ with the writes
  std::atomic<std::uint64_t> written_{0};  // grows after each write: never ahead of the stream
  Recorder* recorder_;
  int wake_fd_;  // eventfd polled beside stdin
};

}  // namespace agentbox::server
