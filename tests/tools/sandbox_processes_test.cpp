// Background processes and sessions (tools/process_tools.cpp,
// tools/session_tools.cpp) in real sandboxes (label sandbox).
#include "harness.h"

#include "sandbox/manager_sandboxes.h"

using namespace agentbox;
using namespace agentbox::tools;
using namespace agentbox::tools::test;

TEST_CASE("manager: a background process from start to exit", "[tools][processes][manager]") {
  ManagerFixture real;
  ToolHarness tools(real.sandboxes.get());
  auto start = tools.checked("process_start", {{"command", "read line; echo got $line; exit 4"}});
  std::string id = start.structured["process_id"];
  CHECK(start.text.rfind("Started " + id + " (pid ", 0) == 0);
  auto list = tools.checked("process_list", json::object());
  CHECK(list.text.find(id + ": running  read line;") != std::string::npos);
  auto write = tools.checked("process_write", {{"process_id", id}, {"data", "hi\n"}, {"eof", true}});
  CHECK(write.text == "Wrote 3 bytes");
  auto wait = tools.checked("process_wait", {{"process_id", id}, {"timeout_ms", 20'000}});
  CHECK(wait.text == id + ": exited (exit code 4)");
  auto output = tools.checked("process_output", {{"process_id", id}});
  CHECK(output.text == "got hi\n[" + id + ": exited (exit code 4); stdout read to byte 7 of 7, stderr to 0 of 0; all output read]");

  auto sleeper = tools.checked("process_start", {{"command", "sleep 60"}});
  std::string sid = sleeper.structured["process_id"];
  auto waited = tools.checked("process_wait", {{"process_id", sid}, {"timeout_ms", 100}});
  CHECK(waited.structured["timed_out"] == true);
  CHECK(waited.text == sid + ": running — still running after the timeout");
  auto kill = tools.checked("process_kill", {{"process_id", sid}});
  CHECK(kill.structured["status"] == "killed");
  CHECK(error_code(tools.checked("process_output", {{"process_id", "p-none"}})) == "PROCESS_NOT_FOUND");
}

TEST_CASE("manager: sessions are made, listed in pages and deleted", "[tools][sessions][manager]") {
  sandbox::Limits limits;
  limits.inline_output_chars = 200;  // a few sessions to a page
  ManagerFixture real(limits);
  ToolHarness tools(real.sandboxes.get());
  for (int i = 0; i < 6; ++i) {
    auto made = tools.checked("session_create", {{"name", "s" + std::to_string(i)}});
    CHECK(made.text == "Created session 's" + std::to_string(i) + "' in /workspace");
  }
  CHECK(error_code(tools.checked("session_create", {{"name", "s0"}})) == "SESSION_EXISTS");
  std::vector<std::string> names;
  std::string cursor;
  do {
    json args = json::object();
    if (!cursor.empty()) args["cursor"] = cursor;
    auto page = tools.checked("session_list", args);
    for (const auto& s : page.structured["sessions"]) names.push_back(s["session"]);
    cursor = page.structured.value("next_cursor", "");
    if (!cursor.empty()) CHECK(page.text.find("sessions shown; next: session_list cursor \"" + cursor + "\"]") != std::string::npos);
  } while (!cursor.empty() && names.size() < 20);
  CHECK(names == std::vector<std::string>{"default", "s0", "s1", "s2", "s3", "s4", "s5"});
  CHECK(error_code(tools.checked("session_list", {{"cursor", "gone"}})) == "INVALID_ARGUMENTS");
  auto deleted = tools.checked("session_delete", {{"session", "s3"}});
  CHECK(deleted.text == "Deleted session 's3'");
  CHECK(error_code(tools.checked("session_delete", {{"session", "s3"}})) == "SESSION_NOT_FOUND");
}
