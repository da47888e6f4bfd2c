// The exposed port rows (catalog.h, ExposedPortRecord; docs/design.md section 12).
#include "persistence/catalog_sql.h"

#include <sqlite3.h>

namespace agentbox::persistence {

void Catalog::add_exposed_port(const ExposedPortRecord& record) {
  transaction([&] {
    // Not INSERT OR REPLACE: that would settle a clash on the host port by
    // deleting the other conversation's row.
    Statement(db_, "INSERT INTO exposed_ports (conversation_id, port, host_port, address, created_at) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_id, port) DO UPDATE SET "
                   "host_port = excluded.host_port, address = excluded.address")
        .bind(1, record.conversation)
        .bind(2, std::int64_t{record.port})
        .bind(3, std::int64_t{record.host_port})
        .bind(4, record.address)
        .bind(5, record.created_at.empty() ? iso_now() : record.created_at)
        .run();
  });
}

bool Catalog::remove_exposed_port(const std::string& conversation, int port) {
  return transaction([&] {
    Statement(db_, "DELETE FROM exposed_ports WHERE conversation_id = ? AND port = ?")
        .bind(1, conversation)
        .bind(2, std::int64_t{port})
        .run();
    return sqlite3_changes(db_) > 0;
  });
}

std::vector<ExposedPortRecord> Catalog::exposed_ports(const std::string& conversation) {
  std::lock_guard lock(mutex_);
  Statement st(db_, conversation.empty()
                        ? "SELECT conversation_id, port, host_port, address, created_at FROM exposed_ports "
                          "ORDER BY conversation_id, port"
                        : "SELECT conversation_id, port, host_port, address, created_at FROM exposed_ports "
                          "WHERE conversation_id = ? ORDER BY port");
  if (!conversation.empty()) st.bind(1, conversation);
  std::vector<ExposedPortRecord> rows;
  while (st.step())
    rows.push_back({st.text(0), static_cast<int>(st.integer(1)), static_cast<int>(st.integer(2)), st.text(3),
                    st.text(4)});
  return rows;
}

}  // namespace agentbox::persistence
