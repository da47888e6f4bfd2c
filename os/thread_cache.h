// Runs jobs on threads that are kept for reuse: a job may block for as long
// as it likes (an exec waits on its command, a sandbox may have to start), so
// a fixed pool would not do, but creating a thread per job costs a clone, a
// stack and often a malloc arena on the request path (docs/sandbox.md,
// "Performance"). Idle threads wait for the next job and end after a while.
//
// Caveat: a thread that forks a long-lived child with PR_SET_PDEATHSIG must
// not be one of these (the signal fires when that *thread* ends).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace agentbox::os {

class ThreadCache {
 public:
  explicit ThreadCache(std::chrono::milliseconds idle_timeout = std::chrono::seconds(30))
      : state_(std::make_shared<State>(idle_timeout)) {}
  // Idle threads are told to end; a thread running a job finishes it first
  // (the job must not refer to what dies with the cache's owner).
  ~ThreadCache();
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  // Starts job on an idle thread, or on a new one when none is idle.
  void run(std::function<void()> job);

 private:
  // Shared with the threads, which may outlive the cache.
  struct State {
    explicit State(std::chrono::milliseconds timeout) : idle_timeout(timeout) {}
    const std::chrono::milliseconds idle_timeout;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> jobs;
    std::size_t idle = 0;
    bool stopping = false;
  };
  static void worker(std::shared_ptr<State> state, std::function<void()> job);

  std::shared_ptr<State> state_;
};

}  // namespace agentbox::os
