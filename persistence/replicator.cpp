#include "persistence/replicator.h"

#include <spdlog/spdlog.h>

namespace agentbox::persistence {

namespace {

constexpr auto kRound = std::chrono::seconds(1);
constexpr auto kMaxBackoff = std::chrono::milliseconds(5'000);

std::vector<SnapshotRecord> complete_rows(Catalog& catalog, const std::string& sandbox) {
  std::vector<SnapshotRecord> rows;
  for (auto& r : catalog.snapshots(sandbox))
    if (r.complete && !r.removing) rows.push_back(std::move(r));
  return rows;
}

// What the manifest is written from (RemoteStore::sync): the conversation,
// whether it was cleared, and the snapshots. Not the state itself: a restore
// (stopped, then active) changes nothing the store holds.
std::string fingerprint(const SandboxRecord& sandbox, const std::vector<SnapshotRecord>& rows) {
  std::string out = sandbox.conversation + "\n" + (sandbox.state == SandboxState::None ? "cleared" : "") + "\n";
  for (const auto& r : rows) out += r.id + " " + r.digest + " " + r.path + "\n";
  return out;
}

}  // namespace

Replicator::Replicator(std::unique_ptr<RemoteStore> store, Catalog& catalog)
    : store_(std::move(store)), catalog_(catalog), thread_([this] { main(); }) {}

Replicator::~Replicator() { stop(); }

void Replicator::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  store_->cancel();  // an upload under way is killed, not waited for: the next start finishes it
  if (thread_.joinable()) thread_.join();
}

void Replicator::nudge() {
  {
    std::lock_guard lock(mutex_);
    nudged_ = true;
  }
  wake_.notify_all();
}

StoreStatus Replicator::status(const std::string& sandbox) {
  StoreStatus out;
  out.url = store_->where().url;
  auto rows = complete_rows(catalog_, sandbox);
  std::lock_guard lock(mutex_);
  auto it = entries_.find(sandbox);
  for (const auto& r : rows)
    if (it == entries_.end() || !it->second.stored.count(r.id)) ++out.pending;
  if (it != entries_.end() && !it->second.error.empty()) {
    out.state = "failing";
    out.error = it->second.error;
  } else {
    out.state = out.pending == 0 ? "synced" : "pending";
  }
  return out;
}

void Replicator::forget(const std::string& conversation, const std::string& sandbox) {
  catalog_.add_store_erasure(conversation, sandbox);
  {
    std::lock_guard lock(mutex_);
    entries_.erase(sandbox);
  }
  nudge();
}

void Replicator::erasures(const std::string& only_conversation) {
  std::lock_guard lock(erase_mutex_);
  for (const auto& [conversation, sandbox] : catalog_.store_erasures()) {
    if (!only_conversation.empty() && conversation != only_conversation) continue;
    store_->erase(conversation, sandbox);  // throws: kept for the next round
    catalog_.remove_store_erasure(conversation, sandbox);
    spdlog::info("snapshot store: the copies of destroyed conversation '{}' (sandbox {}) are erased", conversation,
                 sandbox);
  }
}

bool Replicator::prepare(const std::string& conversation) {
  erasures(conversation);
  return store_->import(conversation);
}

void Replicator::main() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, kRound, [this] { return stopping_ || nudged_; }) && stopping_) return;
      nudged_ = false;
    }
    try {
      round();
    } catch (const std::exception& e) {
      spdlog::error("snapshot store: {}", e.what());  // the catalog, say; the next round tries again
    }
  }
}

void Replicator::round() {
  try {
    erasures("");
  } catch (const std::exception& e) {
    spdlog::warn("snapshot store: an erasure waits for the store: {}", e.what());
  }
  std::set<std::string> present;
  for (const auto& sandbox : catalog_.sandboxes()) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (sandbox.conversation.empty() || sandbox.state == SandboxState::Destroying ||
        sandbox.state == SandboxState::Clearing)
      continue;
    present.insert(sandbox.id);
    auto rows = complete_rows(catalog_, sandbox.id);
    std::string print = fingerprint(sandbox, rows);
    {
      std::lock_guard lock(mutex_);
      auto it = entries_.find(sandbox.id);
      if (it == entries_.end() && rows.empty()) continue;  // nothing the store needs yet
      if (it != entries_.end() && it->second.synced && it->second.fingerprint == print) continue;
      if (it != entries_.end() && Clock::now() < it->second.next_try) continue;
    }
    Entry done;
    try {
      done.stored = store_->sync(sandbox);
      done.synced = true;
      done.fingerprint = print;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      Entry& entry = entries_[sandbox.id];
      if (entry.error != e.what())
        spdlog::warn("snapshot store: sandbox {} ({}) not stored; kept locally and retried: {}", sandbox.id,
                     sandbox.conversation, e.what());
      entry.error = e.what();
      entry.synced = false;
      entry.backoff = std::min<std::chrono::milliseconds>(
          std::max<std::chrono::milliseconds>(entry.backoff * 2, std::chrono::milliseconds(1'000)), kMaxBackoff);
      entry.next_try = Clock::now() + entry.backoff;
      continue;
    }
    std::lock_guard lock(mutex_);
    Entry& entry = entries_[sandbox.id];
    if (!entry.error.empty())
      spdlog::info("snapshot store: sandbox {} ({}) stored again after: {}", sandbox.id, sandbox.conversation,
                   entry.error);
    entry = std::move(done);
  }
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) it = present.count(it->first) ? std::next(it) : entries_.erase(it);
}

}  // namespace agentbox::persistence
