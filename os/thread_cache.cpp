#include "os/thread_cache.h"

#include <thread>

namespace agentbox::os {

ThreadCache::~ThreadCache() {
  std::lock_guard lock(state_->mutex);
  state_->stopping = true;
  state_->wake.notify_all();
}

void ThreadCache::run(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mutex);
    // No more queued jobs than idle threads: each one is taken at once.
    if (state_->idle > state_->jobs.size()) {
      state_->jobs.push_back(std::move(job));
      state_->wake.notify_one();
      return;
    }
  }
  std::thread(worker, state_, std::move(job)).detach();
}

void ThreadCache::worker(std::shared_ptr<State> state, std::function<void()> job) {
  for (;;) {
    job();
    job = nullptr;  // release what the job holds before waiting for the next
    std::unique_lock lock(state->mutex);
    ++state->idle;
    bool woken = state->wake.wait_for(lock, state->idle_timeout,
                                      [&] { return state->stopping || !state->jobs.empty(); });
    --state->idle;
    if (!woken || state->jobs.empty()) return;
    job = std::move(state->jobs.front());
    state->jobs.pop_front();
  }
}

}  // namespace agentbox::os
