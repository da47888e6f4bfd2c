// The code context rows (catalog.h, CodeContextRecord; docs/design.md
// section 12): which contexts a sandbox has and each one's successful cells
// in order, what code_run replays into a new interpreter.
#include "persistence/catalog_sql.h"

namespace agentbox::persistence {

bool Catalog::add_code_context(const CodeContextRecord& context) {
  return transaction([&] {
    Statement known(db_, "SELECT 1 FROM code_contexts WHERE sandbox_id = ? AND id = ?");
    known.bind(1, context.sandbox).bind(2, context.id);
    if (known.step()) return true;
    Statement count(db_, "SELECT COUNT(*) FROM code_contexts WHERE sandbox_id = ?");
    count.bind(1, context.sandbox);
    if (count.step() && count.integer(0) >= kMaxCodeContexts) return false;
    Statement(db_, "INSERT INTO code_contexts (sandbox_id, id, language, created_at) VALUES (?, ?, ?, ?)")
        .bind(1, context.sandbox).bind(2, context.id).bind(3, context.language)
        .bind(4, context.created_at.empty() ? iso_now() : context.created_at).run();
    return true;
  });
}

namespace {
constexpr const char* kContextColumns =
    "SELECT c.sandbox_id, c.id, c.language, c.created_at, "
    "(SELECT COUNT(*) FROM code_cells k WHERE k.sandbox_id = c.sandbox_id AND k.context_id = c.id) "
    "FROM code_contexts c WHERE c.sandbox_id = ?";

CodeContextRecord context_row(const Statement& st) {
  return CodeContextRecord{st.text(0), st.text(1), st.text(2), st.text(3), st.integer(4)};
}
}  // namespace

std::vector<CodeContextRecord> Catalog::code_contexts(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string(kContextColumns) + " ORDER BY c.created_at, c.id").c_str());
  st.bind(1, sandbox);
  std::vector<CodeContextRecord> out;
  while (st.step()) out.push_back(context_row(st));
  return out;
}

std::optional<CodeContextRecord> Catalog::find_code_context(const std::string& sandbox, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string(kContextColumns) + " AND c.id = ?").c_str());
  st.bind(1, sandbox).bind(2, id);
  if (!st.step()) return std::nullopt;
  return context_row(st);
}

bool Catalog::add_code_cell(const std::string& sandbox, const std::string& id, const std::string& code) {
  return transaction([&] {
    Statement held(db_, "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(code AS BLOB))), 0), COALESCE(MAX(seq), 0) "
                        "FROM code_cells WHERE sandbox_id = ? AND context_id = ?");
    held.bind(1, sandbox).bind(2, id);
    held.step();
    if (held.integer(0) >= kMaxCodeCells || held.integer(1) + static_cast<std::int64_t>(code.size()) > kMaxCodeBytes)
      return false;
    Statement(db_, "INSERT INTO code_cells (sandbox_id, context_id, seq, code) VALUES (?, ?, ?, ?)")
        .bind(1, sandbox).bind(2, id).bind(3, held.integer(2) + 1).bind(4, code).run();
    return true;
  });
}

std::vector<std::string> Catalog::code_cells(const std::string& sandbox, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT code FROM code_cells WHERE sandbox_id = ? AND context_id = ? ORDER BY seq");
  st.bind(1, sandbox).bind(2, id);
  std::vector<std::string> out;
  while (st.step()) out.push_back(st.text(0));
  return out;
}

bool Catalog::remove_code_context(const std::string& sandbox, const std::string& id) {
  return transaction([&] {
    Statement(db_, "DELETE FROM code_cells WHERE sandbox_id = ? AND context_id = ?").bind(1, sandbox).bind(2, id).run();
    Statement known(db_, "SELECT 1 FROM code_contexts WHERE sandbox_id = ? AND id = ?");
    known.bind(1, sandbox).bind(2, id);
    bool had = known.step();
    Statement(db_, "DELETE FROM code_contexts WHERE sandbox_id = ? AND id = ?").bind(1, sandbox).bind(2, id).run();
    return had;
  });
}

void Catalog::drop_code_contexts(const std::string& sandbox) {
  Statement(db_, "DELETE FROM code_cells WHERE sandbox_id = ?").bind(1, sandbox).run();
  Statement(db_, "DELETE FROM code_contexts WHERE sandbox_id = ?").bind(1, sandbox).run();
}

}  // namespace agentbox::persistence
