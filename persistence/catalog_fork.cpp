// A fork's rows (Catalog::add_fork; docs/design.md section 9, "Fork").
#include "persistence/catalog_sql.h"

namespace agentbox::persistence {

bool Catalog::add_fork(const std::string& conversation, const SnapshotRecord& s,
                       const std::vector<SessionRecord>& sessions) {
  return transaction([&] {
    if (find_by_conversation(conversation)) return false;
    std::string now = iso_now();
    Statement(db_,
              "INSERT INTO sandboxes (id, state, created_at, updated_at, restore_snapshot) VALUES (?, ?, ?, ?, ?)")
        .bind(1, s.sandbox).bind(2, std::string(state_name(SandboxState::Stopped))).bind(3, now).bind(4, now)
        .bind(5, s.id).run();
    Statement(db_, "INSERT INTO conversations (id, sandbox_id, created_at) VALUES (?, ?, ?)")
        .bind(1, conversation).bind(2, s.sandbox).bind(3, now).run();
    SnapshotRecord complete = s;
    complete.complete = true;
    add_snapshot(complete);
    for (const auto& session : sessions)
      Statement(db_, "INSERT INTO sessions (sandbox_id, name, cwd, state) VALUES (?, ?, ?, ?)")
          .bind(1, s.sandbox).bind(2, session.name).bind(3, session.cwd).bind(4, session.state).run();
    return true;
  });
}

bool Catalog::add_clone(const std::string& conversation, const std::string& sandbox,
                        const std::vector<SessionRecord>& sessions) {
  return transaction([&] {
    if (find_by_conversation(conversation)) return false;
    std::string now = iso_now();
    Statement(db_, "INSERT INTO sandboxes (id, state, created_at, updated_at) VALUES (?, ?, ?, ?)")
        .bind(1, sandbox).bind(2, std::string(state_name(SandboxState::Active))).bind(3, now).bind(4, now).run();
    Statement(db_, "INSERT INTO conversations (id, sandbox_id, created_at) VALUES (?, ?, ?)")
        .bind(1, conversation).bind(2, sandbox).bind(3, now).run();
    for (const auto& session : sessions)
      Statement(db_, "INSERT INTO sessions (sandbox_id, name, cwd, state) VALUES (?, ?, ?, ?)")
          .bind(1, sandbox).bind(2, session.name).bind(3, session.cwd).bind(4, session.state).run();
    return true;
  });
}

}  // namespace agentbox::persistence
