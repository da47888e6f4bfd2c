// The file tools (tools/file_tools.cpp) in real sandboxes (label sandbox):
// each result checked against its schema, the text a model reads, and the
// agent's error codes as error results.
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

TEST_CASE("manager: write, read, edit, stat, list and search a file", "[tools][files][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto write = tools.checked("file_write", {{"path", "src/a.txt"}, {"content", "one\ntwo\n"}});
  CHECK(write.text == "Wrote 8 bytes to /workspace/src/a.txt (size now 8)");

  auto read = tools.checked("file_read", {{"path", "/workspace/src/a.txt"}});
  CHECK(read.structured["content"] == "one\ntwo\n");
  CHECK(read.text == "one\ntwo\n");  // the whole file, nothing added
  auto part = tools.checked("file_read", {{"path", "src/a.txt"}, {"offset", 4}, {"length", 2}});
  CHECK(part.text == "tw\n[showing bytes 4-6 of 8; next: file_read offset 6]");

  auto edit = tools.checked("file_edit", {{"path", "src/a.txt"}, {"old_string", "two"}, {"new_string", "2"}});
  CHECK(edit.structured["replacements"] == 1);
  CHECK(edit.text.rfind("Replaced 1 occurrence in /workspace/src/a.txt\n", 0) == 0);

  auto stat = tools.checked("file_stat", {{"path", "src/a.txt"}});
  CHECK(stat.text.rfind("/workspace/src/a.txt: file, 6 bytes, mode 0644, modified ", 0) == 0);
  auto missing = tools.checked("file_stat", {{"path", "src/none"}});
  CHECK_FALSE(missing.is_error);
  CHECK(missing.text == "/workspace/src/none does not exist");

  tools.checked("file_mkdir", {{"path", "src/sub"}});
  auto list = tools.checked("file_list", {{"path", "src"}});
  CHECK(list.text == "/workspace/src/a.txt  6 B\n/workspace/src/sub/\n");

  auto search = tools.checked("file_search", {{"pattern", "one"}});
  CHECK(search.text.rfind("/workspace/src/a.txt:1:one\n[1 matches, ", 0) == 0);

  auto move = tools.checked("file_move", {{"from", "src/a.txt"}, {"to", "src/b.txt"}});
  CHECK(move.text == "Moved /workspace/src/a.txt to /workspace/src/b.txt");
  auto del = tools.checked("file_delete", {{"path", "src"}, {"recursive", true}});
  CHECK(del.structured["deleted"] == true);
}

TEST_CASE("manager: file errors are error results with the agent's code", "[tools][files][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  CHECK(error_code(tools.checked("file_read", {{"path", "nope.txt"}})) == "FILE_NOT_FOUND");
  tools.checked("file_write", {{"path", "a.txt"}, {"content", "x x"}});
  CHECK(error_code(tools.checked("file_edit", {{"path", "a.txt"}, {"old_string", "y"}, {"new_string", "z"}})) ==
        "NO_MATCH");
  CHECK(error_code(tools.checked("file_edit", {{"path", "a.txt"}, {"old_string", "x"}, {"new_string", "z"}})) ==
        "AMBIGUOUS_MATCH");
  CHECK(error_code(tools.checked("file_write", {{"path", "a.txt"}, {"content", ""}, {"mode", "create"}})) ==
        "FILE_EXISTS");
  CHECK(error_code(tools.checked("file_list", {{"path", "a.txt"}})) == "NOT_DIRECTORY");
}
