// Incremental snapshots' links (catalog.h, SnapshotRecord::parent;
// docs/design.md section 9, "Incremental snapshots").
#include "persistence/catalog_sql.h"

#include <set>

namespace agentbox::persistence {

namespace {

// Longer chains are never made (store.cpp starts a full archive first); a
// longer one read here is damage, and so is a loop.
constexpr std::size_t kMaxChainRead = 1024;

}  // namespace

std::vector<SnapshotRecord> Catalog::chain(const SnapshotRecord& snapshot) {
  std::lock_guard lock(mutex_);
  std::vector<SnapshotRecord> out{snapshot};
  std::set<std::string> seen{snapshot.id};
  while (!out.back().parent.empty()) {
    const std::string parent = out.back().parent;
    auto found = find_snapshot(parent);
    if (!found)
      throw CatalogError("snapshot " + out.back().id + " holds the changes since snapshot " + parent +
                         ", which the catalog no longer has");
    if (!found->complete)
      throw CatalogError("snapshot " + out.back().id + " holds the changes since snapshot " + parent +
                         ", which is not complete (being written or removed)");
    if (!seen.insert(parent).second || out.size() >= kMaxChainRead)
      throw CatalogError("the snapshots before " + snapshot.id + " form a loop or a chain of over " +
                         std::to_string(kMaxChainRead) + " links; the catalog is damaged");
    out.push_back(std::move(*found));
  }
  return {out.rbegin(), out.rend()};
}

std::vector<SnapshotRecord> Catalog::children(const std::string& snapshot) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  {
    Statement st(db_, "SELECT id FROM snapshots WHERE parent = ? ORDER BY created_at, rowid");
    st.bind(1, snapshot);
    while (st.step()) ids.push_back(st.text(0));
  }
  std::vector<SnapshotRecord> out;
  for (const auto& id : ids)
    if (auto s = find_snapshot(id)) out.push_back(std::move(*s));
  return out;
}

void Catalog::replace_archive(const SnapshotRecord& merged) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE snapshots SET path = ?, digest = ?, bytes = ?, files = ?, parent = ? WHERE id = ?")
      .bind(1, merged.path)
      .bind(2, merged.digest)
      .bind(3, static_cast<std::int64_t>(merged.bytes))
      .bind(4, static_cast<std::int64_t>(merged.files))
      .bind(5, merged.parent)
      .bind(6, merged.id)
      .run();
}

}  // namespace agentbox::persistence
