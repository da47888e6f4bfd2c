#include "agent/session_queue.h"

#include <algorithm>

namespace agentbox::agent {

std::unique_ptr<SessionQueue::Place> SessionQueue::enter(const std::string& session) {
  std::lock_guard lock(mutex_);
  std::uint64_t number = next_++;
  lines_[session].push_back(number);
  return std::make_unique<Place>(*this, session, number);
}

bool SessionQueue::idle(const std::string& session) const {
  std::lock_guard lock(mutex_);
  return lines_.find(session) == lines_.end();
}

void SessionQueue::Place::wait(AgentRequest& request) {
  auto first = [this] {
    const auto& line = queue_.lines_[session_];
    return !line.empty() && line.front() == number_;
  };
  {
    std::lock_guard lock(queue_.mutex_);
    if (first()) return;
  }
  // A cancelled call leaves the line at once instead of waiting its turn;
  // the handler that runs later replaces this hook with its own.
  request.on_cancel([&queue = queue_] {
    std::lock_guard lock(queue.mutex_);
    queue.turn_.notify_all();
  });
  std::unique_lock lock(queue_.mutex_);
  queue_.turn_.wait(lock, [&] { return first() || request.cancelled(); });
  if (!first()) throw SandboxError(codes::kInternal, "cancelled while waiting for the session's previous command");
}

void SessionQueue::leave(const std::string& session, std::uint64_t number) {
  std::lock_guard lock(mutex_);
  auto it = lines_.find(session);
  if (it == lines_.end()) return;
  auto& line = it->second;
  line.erase(std::remove(line.begin(), line.end(), number), line.end());
  if (line.empty()) lines_.erase(it);
  turn_.notify_all();
}

std::string ordering_session(const std::string& method, const json& params) {
  bool ordered = method == contract::methods::kExec || method == contract::methods::kProcessStart ||
                 method.rfind(contract::methods::kFilePrefix, 0) == 0;
  if (!ordered) return {};
  auto it = params.is_object() ? params.find("session") : params.end();
  if (it != params.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
    return it->get<std::string>();
  return "default";
}

}  // namespace agentbox::agent
