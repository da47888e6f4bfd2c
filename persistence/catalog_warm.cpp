// The warm cache's rows (catalog.h, WarmRecord; docs/design.md section 9).
#include "persistence/catalog_sql.h"

namespace agentbox::persistence {

namespace {

constexpr const char* kWarmColumns = "sandbox_id, snapshot_id, bytes, stamp, cached_at FROM warm";

WarmRecord warm_row(const Statement& st) {
  WarmRecord w;
  w.sandbox = st.text(0);
  w.snapshot = st.text(1);
  w.bytes = static_cast<std::uint64_t>(st.integer(2));
  w.stamp = st.text(3);
  w.cached_at = st.text(4);
  return w;
}

}  // namespace

void Catalog::set_warm(const WarmRecord& warm) {
  transaction([&] {
    Statement(db_,
              "INSERT OR REPLACE INTO warm (sandbox_id, snapshot_id, bytes, stamp, cached_at) VALUES (?, ?, ?, ?, ?)")
        .bind(1, warm.sandbox)
        .bind(2, warm.snapshot)
        .bind(3, static_cast<std::int64_t>(warm.bytes))
        .bind(4, warm.stamp)
        .bind(5, warm.cached_at.empty() ? iso_now() : warm.cached_at)
        .run();
  });
}

std::optional<WarmRecord> Catalog::find_warm(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kWarmColumns + " WHERE sandbox_id = ?").c_str());
  st.bind(1, sandbox);
  if (!st.step()) return std::nullopt;
  return warm_row(st);
}

std::optional<WarmRecord> Catalog::take_warm(const std::string& sandbox) {
  return transaction([&]() -> std::optional<WarmRecord> {
    Statement st(db_, (std::string("SELECT ") + kWarmColumns + " WHERE sandbox_id = ?").c_str());
    st.bind(1, sandbox);
    if (!st.step()) return std::nullopt;
    WarmRecord w = warm_row(st);
    Statement(db_, "DELETE FROM warm WHERE sandbox_id = ?").bind(1, sandbox).run();
    return w;
  });
}

std::vector<WarmRecord> Catalog::warm_records() {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kWarmColumns + " ORDER BY cached_at, sandbox_id").c_str());
  std::vector<WarmRecord> all;
  while (st.step()) all.push_back(warm_row(st));
  return all;
}

}  // namespace agentbox::persistence
