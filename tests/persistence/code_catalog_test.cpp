// The catalog's code contexts (catalog_code.cpp): cells in order and only
// per sandbox, the bounds, and the rows gone with a destroy or a removed
// sandbox (docs/design.md section 12).
#include "temp_dir.h"
#include "persistence/catalog.h"

#include <catch2/catch.hpp>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

TEST_CASE("code contexts keep their cells in order, per sandbox, across a reopen") {
  fs::path dir = test::fresh_temp_dir("code_catalog", "order");
  {
    Catalog c(dir / "c.db");
    std::string a = c.sandbox_for("conv-a", [] { return std::string("sa"); }).id;
    std::string b = c.sandbox_for("conv-b", [] { return std::string("sb"); }).id;
    CHECK(c.add_code_context({a, "python", "python", "", 0}));
    CHECK(c.add_code_context({a, "python", "python", "", 0}));  // already there: kept as it was
    CHECK(c.add_code_context({b, "python", "python", "", 0}));
    CHECK(c.add_code_cell(a, "python", "x = 1"));
    CHECK(c.add_code_cell(a, "python", "x += 1"));
    CHECK(c.add_code_cell(b, "python", "y = 2"));
  }
  Catalog c(dir / "c.db");
  CHECK(c.code_cells("sa", "python") == std::vector<std::string>{"x = 1", "x += 1"});
  CHECK(c.code_cells("sb", "python") == std::vector<std::string>{"y = 2"});
  auto contexts = c.code_contexts("sa");
  REQUIRE(contexts.size() == 1);
  CHECK(contexts[0].language == "python");
  CHECK(contexts[0].cells == 2);
  CHECK(c.find_code_context("sa", "python"));
  CHECK_FALSE(c.find_code_context("sa", "bash"));
  CHECK(c.remove_code_context("sa", "python"));
  CHECK_FALSE(c.remove_code_context("sa", "python"));
  CHECK(c.code_cells("sa", "python").empty());
  CHECK(c.code_cells("sb", "python").size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("code contexts are bounded per sandbox, cells by count and bytes") {
  fs::path dir = test::fresh_temp_dir("code_catalog", "bounds");
  Catalog c(dir / "c.db");
  std::string s = c.sandbox_for("conv", [] { return std::string("s"); }).id;
  for (int i = 0; i < Catalog::kMaxCodeContexts; ++i) CHECK(c.add_code_context({s, "ctx-" + std::to_string(i), "bash", "", 0}));
  CHECK_FALSE(c.add_code_context({s, "one-more", "bash", "", 0}));
  CHECK(c.add_code_cell(s, "ctx-0", std::string(Catalog::kMaxCodeBytes - 1, 'a')));
  CHECK_FALSE(c.add_code_cell(s, "ctx-0", "ab"));  // one byte over
  CHECK(c.add_code_cell(s, "ctx-0", "a"));
  for (int i = 0; i < Catalog::kMaxCodeCells; ++i) CHECK(c.add_code_cell(s, "ctx-1", ":"));
  CHECK_FALSE(c.add_code_cell(s, "ctx-1", ":"));
  CHECK(c.code_cells(s, "ctx-1").size() == static_cast<std::size_t>(Catalog::kMaxCodeCells));
  fs::remove_all(dir);
}

TEST_CASE("a destroy drops the sandbox's code contexts, kept snapshots or not") {
  fs::path dir = test::fresh_temp_dir("code_catalog", "destroy");
  Catalog c(dir / "c.db");
  std::string kept = c.sandbox_for("conv-1", [] { return std::string("s1"); }).id;
  std::string gone = c.sandbox_for("conv-2", [] { return std::string("s2"); }).id;
  for (const auto& s : {kept, gone}) {
    c.add_code_context({s, "python", "python", "", 0});
    c.add_code_cell(s, "python", "x = 1");
  }
  c.begin_destroy(kept, true);
  CHECK(c.code_contexts(kept).empty());
  CHECK(c.code_cells(kept, "python").empty());
  c.remove_sandbox(gone);
  CHECK(c.code_contexts(gone).empty());
  CHECK(c.code_cells(gone, "python").empty());
  fs::remove_all(dir);
}
