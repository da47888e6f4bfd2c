// The spare: a sandbox made ready before its conversation exists
// (ManagerOptions::spare, docs/sandbox.md "Cold start"), so that a new
// conversation's first call does not pay for all of its start. Prepared: its
// directories, cgroup and lock, and a box started held (driver.h). Warm: the
// box released and its agent's hello received. One spare at a time, built on
// the pool's own thread and replaced once no start is in progress (a build
// competes with a start for the CPU), backing off when builds fail.
#pragma once

#include "persistence/sandbox_lock.h"
#include "sandbox/driver.h"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace agentbox::sandbox {

// A sandbox made ready ahead; owned by the pool until a new conversation
// claims it. Destroying an unclaimed one ends its box and removes its
// storage and directories.
struct PreparedSandbox {
  std::string id;
  SandboxDirs dirs;
  persistence::SandboxLock lock;
  std::unique_ptr<Box> box;             // held at its gate, or (warm) running
  std::function<void()> release_owner;  // gives its host ids back once its directories are gone
  bool warm = false;
  bool claimed = false;      // its directories belong to a conversation now
  Driver* driver = nullptr;  // drops its storage when unclaimed
  PreparedSandbox() = default;
  PreparedSandbox(const PreparedSandbox&) = delete;
  PreparedSandbox& operator=(const PreparedSandbox&) = delete;
  ~PreparedSandbox();
  // Whether its agent still runs (a launcher may have died at the gate).
  bool alive() const;
};

class SparePool {
 public:
  enum class Kind { None, Prepared, Warm };
  // Builds a spare (warm: its agent running). Throws on failure.
  using Build = std::function<std::unique_ptr<PreparedSandbox>(bool warm)>;
  // Whether a warm spare fits under max_sandboxes now.
  using RoomForWarm = std::function<bool()>;

  SparePool(Kind kind, Build build, RoomForWarm room);
  ~SparePool();  // stop()
  SparePool(const SparePool&) = delete;
  SparePool& operator=(const SparePool&) = delete;

  Kind kind() const { return kind_; }
  // The spare, if one is ready and alive; a dead one is destroyed and
  // replaced.
  std::unique_ptr<PreparedSandbox> take();
  // The spare when it is warm (it counts toward max_sandboxes: a start that
  // needs the room drops it).
  std::unique_ptr<PreparedSandbox> take_warm();
  // "none", "prepared" or "warm".
  std::string state();
  // A start is in progress while a guard lives: no spare is built, and the
  // last start to end asks for a replacement.
  class StartGuard {
   public:
    explicit StartGuard(SparePool& pool);
    ~StartGuard();
    StartGuard(const StartGuard&) = delete;
    StartGuard& operator=(const StartGuard&) = delete;

   private:
    SparePool& pool_;
  };
  // Ends the pool's thread and destroys an unclaimed spare (it leaves
  // nothing behind). Idempotent.
  void stop();

 private:
  void main();

  Kind kind_;
  Build build_;
  RoomForWarm room_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::unique_ptr<PreparedSandbox> spare_;  // guarded by mutex_
  bool wanted_ = false;                     // refill once no start is in progress; guarded by mutex_
  int starting_ = 0;                        // starts in progress; guarded by mutex_
  bool stopping_ = false;                   // guarded by mutex_
  std::thread thread_;
};

}  // namespace agentbox::sandbox
