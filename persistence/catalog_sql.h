// What the catalog's source files share (catalog.cpp, catalog_warm.cpp): a
// prepared statement and the IMMEDIATE transaction. Included by nothing else.
#pragma once

#include "persistence/catalog.h"

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace agentbox::persistence {

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      throw CatalogError(std::string("catalog: cannot prepare statement: ") + sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // True while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw CatalogError(std::string("catalog: ") + sqlite3_errmsg(db_), rc & 0xff);
  }
  void run() {
    while (step()) {
    }
  }
  std::string text(int col) const {
    auto p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

template <typename Fn>
auto Catalog::transaction(Fn&& fn) -> decltype(fn()) {
  std::lock_guard lock(mutex_);
  // IMMEDIATE takes the write lock up front, so two servers never both read
  // then both write (no SQLITE_BUSY half-way through, no lost update).
  exec("BEGIN IMMEDIATE");
  try {
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      exec("COMMIT");
    } else {
      auto result = fn();
      exec("COMMIT");
      return result;
    }
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace agentbox::persistence
