// Test fixtures, registered only with `serve --test-tools`: they let the protocol
// transcripts exercise progress, cancellation and concurrency without depending
// on a sandbox. Never offered to a real host.
#include "tools/register.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace agentbox::tools {

namespace {

// Wakes a sleeping fixture as soon as its call is cancelled.
struct Wakeup {
  std::mutex mutex;
  std::condition_variable cv;
  bool fired = false;
};

void debug_sleep(const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
  int steps = args.at("steps").get<int>();
  int step_ms = args.at("step_ms").get<int>();
  // Logged so the transcripts can watch server events reach the host.
  spdlog::info("debug_sleep: {} steps of {} ms", steps, step_ms);
  auto wakeup = std::make_shared<Wakeup>();
  context->on_cancel([wakeup] {
    std::lock_guard lock(wakeup->mutex);
    wakeup->fired = true;
    wakeup->cv.notify_all();
  });
  // A detached thread stands in for real asynchronous work: the handler returns
  // at once and the worker pool stays free, as it does for sandbox calls.
  std::thread([args, steps, step_ms, context, reply, wakeup] {
    int done = 0;
    for (; done < steps; ++done) {
      std::unique_lock lock(wakeup->mutex);
      if (wakeup->cv.wait_for(lock, std::chrono::milliseconds(step_ms), [&] { return wakeup->fired; })) break;
      lock.unlock();
      context->progress(done + 1, steps, "step " + std::to_string(done + 1) + " of " + std::to_string(steps));
    }
    if (args.value("fail", false)) {
      reply(ToolResult::error("FIXTURE_FAILED", "debug_sleep was asked to fail after " + std::to_string(done) + " steps"));
      return;
    }
    json out = {{"steps_done", done}, {"conversation", context->conversation()}};
    if (args.contains("echo")) out["echo"] = args["echo"];
    reply(ToolResult::ok(out, "slept " + std::to_string(done) + " steps"));
  }).detach();
}

}  // namespace

void register_debug_tools(Registry& registry) { registry.add("test/debug_sleep", debug_sleep); }

}  // namespace agentbox::tools
