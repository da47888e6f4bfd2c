// An in-test implementation of sandbox::Sandboxes, for a tool's own logic
// only: how it shapes what the sandbox layer answers (a view, a snapshot
// record, an error such as SNAPSHOT_CORRUPT) into its result. Nothing here
// runs a sandbox; tests named "fake sandboxes: ..." use it, the others the
// real Manager (harness.h ManagerFixture).
#pragma once

#include "sandbox/sandboxes.h"

#include <optional>
#include <string>
#include <vector>

namespace agentbox::tools::test {

class FakeSandboxes : public sandbox::Sandboxes {
 public:
  // What the next calls answer; a set error is thrown instead.
  std::optional<SandboxError> error;
  sandbox::SandboxView view;
  std::vector<persistence::SnapshotRecord> list;
  sandbox::SnapshotDone done;
  sandbox::Destroyed destroyed;
  sandbox::Limits limit_values;
  // Reported through the call's progress by snapshot and restore.
  std::vector<double> progress_steps;

  // What the tools asked for.
  std::vector<std::string> calls;  // "acquire c1", "restore c1 snap", ...

  std::unique_ptr<sandbox::SandboxLease> acquire(const std::string& conversation, const sandbox::ProgressFn&) override {
    calls.push_back("acquire " + conversation);
    fail();
    throw SandboxError(codes::kSandboxStartFailed, "the fake starts no sandbox");
  }
  std::unique_ptr<sandbox::SandboxLease> try_acquire(const std::string& conversation) override {
    calls.push_back("try_acquire " + conversation);
    return nullptr;
  }
  sandbox::SandboxView status(const std::string& conversation) override {
    calls.push_back("status " + conversation);
    fail();
    return view;
  }
  std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation) override {
    calls.push_back("snapshots " + conversation);
    fail();
    return list;
  }
  sandbox::SnapshotDone snapshot(const std::string& conversation, const std::string& label,
                                 const sandbox::ProgressFn& progress) override {
    calls.push_back("snapshot " + conversation + " " + label);
    report(progress);
    fail();
    return done;
  }
  sandbox::SnapshotDone restore(const std::string& conversation, const std::string& id,
                                const sandbox::ProgressFn& progress) override {
    calls.push_back("restore " + conversation + " " + id);
    report(progress);
    fail();
    return done;
  }
  sandbox::Forked forked;
  sandbox::Forked fork(const std::string& conversation, const std::string& id, const std::string& to, int count,
                       const sandbox::ProgressFn&) override {
    calls.push_back("fork " + conversation + " " + id + " " + to + " " + std::to_string(count));
    fail();
    return forked;
  }
  sandbox::Destroyed destroy(const std::string& conversation, bool keep) override {
    calls.push_back("destroy " + conversation + (keep ? " keep" : ""));
    fail();
    return destroyed;
  }
  const sandbox::Limits& limits() const override { return limit_values; }

 private:
  void fail() const {
    if (error) throw *error;
  }
  void report(const sandbox::ProgressFn& progress) const {
    for (double step : progress_steps)
      if (progress) progress(step, 100.0, "step");
  }
};

// A snapshot record as the catalog keeps one.
inline persistence::SnapshotRecord snapshot_record(const std::string& id, const std::string& label = "") {
  persistence::SnapshotRecord s;
  s.id = id;
  s.sandbox = "sb1";
  s.created_at = "2026-12-01T10:00:00Z";
  s.bytes = 2'500'000;
  s.files = 42;
  s.digest = "sha256:00";
  s.label = label;
  s.reason = label.empty() ? "idle" : "manual";
  s.complete = true;
  return s;
}

}  // namespace agentbox::tools::test
