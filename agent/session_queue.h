// Arrival order for the calls that name a session (agent side): exec,
// process.start and the file operations run one after another, in the order
// the agent read them, each after the previous one finished (docs/design.md,
// "Sessions"; docs/protocol.md, "Order"). A mutex alone does not give that:
// threads woken for a lock come in any order.
//
// The reader thread takes a place in a session's line (enter) as it reads the
// request; the thread that serves it waits until it is first (wait), and the
// place is given up when the Place is destroyed. Sessions are independent
// lines, so calls on different sessions still run in parallel.
#pragma once

#include "agent/methods.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentbox::agent {

class SessionQueue {
 public:
  class Place {
   public:
    Place(SessionQueue& queue, std::string session, std::uint64_t number)
        : queue_(queue), session_(std::move(session)), number_(number) {}
    ~Place() { queue_.leave(session_, number_); }
    Place(const Place&) = delete;
    Place& operator=(const Place&) = delete;
    // Blocks until every call ahead of this one in its session has finished.
    // Throws SandboxError(CANCELLED) when request is cancelled first.
    void wait(AgentRequest& request);

   private:
    SessionQueue& queue_;
    std::string session_;
    std::uint64_t number_;
  };

  // Only from the one thread that reads requests, so places follow arrival.
  std::unique_ptr<Place> enter(const std::string& session);
  // True when no call holds or waits for a place in the session's line.
  bool idle(const std::string& session) const;

 private:
  void leave(const std::string& session, std::uint64_t number);

  mutable std::mutex mutex_;
  std::condition_variable turn_;
  std::map<std::string, std::deque<std::uint64_t>> lines_;
  std::uint64_t next_ = 1;
};

// The session a request is ordered in: "session" when it is a string, else
// "default" (a malformed value fails in the method itself, in its turn).
// Empty for methods that are not ordered by session.
std::string ordering_session(const std::string& method, const json& params);

}  // namespace agentbox::agent
