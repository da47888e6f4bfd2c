// The snapshot store's rows (s3_store.h): a sandbox imported from the store,
// and the erasures still owed to it.
#include "persistence/catalog_sql.h"

namespace agentbox::persistence {

bool Catalog::add_imported(const std::string& conversation, const std::string& sandbox, SandboxState state,
                           const std::vector<SnapshotRecord>& snapshots, const std::vector<SessionRecord>& sessions) {
  return transaction([&] {
    if (find_by_conversation(conversation) || find_sandbox(sandbox)) return false;
    std::string now = iso_now();
    Statement(db_, "INSERT INTO sandboxes (id, state, created_at, updated_at) VALUES (?, ?, ?, ?)")
        .bind(1, sandbox).bind(2, std::string(state_name(state))).bind(3, now).bind(4, now).run();
    Statement(db_, "INSERT INTO conversations (id, sandbox_id, created_at) VALUES (?, ?, ?)")
        .bind(1, conversation).bind(2, sandbox).bind(3, now).run();
    for (const auto& s : snapshots) add_snapshot(s);
    for (const auto& session : sessions)
      Statement(db_, "INSERT INTO sessions (sandbox_id, name, cwd, state) VALUES (?, ?, ?, ?)")
          .bind(1, sandbox).bind(2, session.name).bind(3, session.cwd).bind(4, session.state).run();
    return true;
  });
}

void Catalog::add_store_erasure(const std::string& conversation, const std::string& sandbox) {
  transaction([&] {
    Statement(db_, "INSERT OR IGNORE INTO store_erasures (conversation_id, sandbox_id, created_at) VALUES (?, ?, ?)")
        .bind(1, conversation).bind(2, sandbox).bind(3, iso_now()).run();
  });
}

std::vector<std::pair<std::string, std::string>> Catalog::store_erasures() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, std::string>> out;
  Statement q(db_, "SELECT conversation_id, sandbox_id FROM store_erasures ORDER BY created_at");
  while (q.step()) out.emplace_back(q.text(0), q.text(1));
  return out;
}

void Catalog::remove_store_erasure(const std::string& conversation, const std::string& sandbox) {
  transaction([&] {
    Statement(db_, "DELETE FROM store_erasures WHERE conversation_id = ? AND sandbox_id = ?")
        .bind(1, conversation).bind(2, sandbox).run();
  });
}

}  // namespace agentbox::persistence
