// Keeps the snapshot store (s3_store.h) holding what the catalog holds, in
// the background: every second (or when nudged) each sandbox whose complete
// snapshots changed since its last sync is synced; a failure (the store
// down, credentials refused) is kept as the sandbox's error and retried
// with backoff (1 s doubling to 5 s), and the local snapshots stay the
// working copies throughout. Erasures owed to the store by a destroy go
// first, and survive a restart (catalog table store_erasures).
#pragma once

#include "persistence/s3_store.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace agentbox::persistence {

struct StoreStatus {
  std::string url;
  std::string state;        // "synced", "pending" or "failing"
  std::size_t pending = 0;  // complete snapshots not in the store yet
  std::string error;        // the last failure while failing
};

class Replicator {
 public:
  Replicator(std::unique_ptr<RemoteStore> store, Catalog& catalog);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  RemoteStore& store() { return *store_; }
  void nudge();
  StoreStatus status(const std::string& sandbox);
  // After a destroy: the conversation's copies go from the store (now, or
  // when it answers again).
  void forget(const std::string& conversation, const std::string& sandbox);
  // Before a conversation's first call on this server: erasures owed for
  // it are done, then the store's copy (if any) is imported. Throws
  // StoreError when the store cannot tell.
  bool prepare(const std::string& conversation);
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string fingerprint;  // of the snapshots last synced
    bool synced = false;
    std::set<std::string> stored;
    std::string error;
    Clock::time_point next_try{};
    std::chrono::milliseconds backoff{0};
  };
  void main();
  void round();
  void erasures(const std::string& only_conversation);

  std::unique_ptr<RemoteStore> store_;
  Catalog& catalog_;
  std::mutex mutex_;  // entries_, stopping_, nudged_
  std::condition_variable wake_;
  bool stopping_ = false;
  bool nudged_ = false;
  std::map<std::string, Entry> entries_;
  std::mutex erase_mutex_;  // one erasure pass at a time (the thread, a first call)
  std::thread thread_;
};

}  // namespace agentbox::persistence
