// File operations through the in-sandbox agent (sandbox/agent_files.h):
// round trips of every byte value, text edge cases, paging, atomic writes,
// edits, listings, search, every error code, and attempts to reach outside
// the sandbox through symlinks and path tricks.
#include "fixture.h"

#include "sandbox/base64.h"
#include "sandbox/file_paths.h"

#include <fstream>
#include <thread>

using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;

namespace {

// The error code a call fails with, or "ok".
std::string code_of(SandboxFixture& f, const std::string& method, json params) {
  try {
    f.call(method, std::move(params));
  } catch (const SandboxError& e) {
    return e.code();
  }
  return "ok";
}

std::string message_of(SandboxFixture& f, const std::string& method, json params) {
  try {
    f.call(method, std::move(params));
  } catch (const SandboxError& e) {
    return e.what();
  }
  return "";
}

json write(SandboxFixture& f, const std::string& path, const std::string& content, json extra = json::object()) {
  extra["path"] = path;
  extra["content"] = content;
  return f.call("file.write", extra);
}

std::string read_all_text(SandboxFixture& f, const std::string& path, std::size_t length) {
  std::string out;
  std::uint64_t offset = 0;
  for (int guard = 0; guard < 100'000; ++guard) {
    auto r = f.call("file.read", {{"path", path}, {"offset", offset}, {"length", length}});
    out += r["content"].get<std::string>();
    offset = r["next_offset"];
    if (!r["truncated"].get<bool>()) break;
  }
  return out;
}

}  // namespace

TEST_CASE("all 256 byte values round trip through base64") {
  SandboxFixture f;
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  bytes += bytes;
  auto w = write(f, "bin/all.bin", base64_encode(bytes), {{"encoding", "base64"}});
  CHECK(w["bytes_written"] == 512);
  CHECK(w["path"] == "/workspace/bin/all.bin");
  auto r = f.call("file.read", {{"path", "bin/all.bin"}, {"encoding", "base64"}});
  CHECK(base64_decode(r["content"].get<std::string>()) == bytes);
  CHECK(r["size"] == 512);
  CHECK(r["truncated"] == false);
  CHECK(r["mime_type"] == "application/octet-stream");
  // What a command sees is the same bytes.
  CHECK(f.exec("od -An -tx1 -v bin/all.bin | tr -d ' \\n' | head -c 16")["stdout"] == "0001020304050607");
  CHECK(code_of(f, "file.read", {{"path", "bin/all.bin"}}) == codes::kBinaryFile);
  CHECK(message_of(f, "file.read", {{"path", "bin/all.bin"}}).find("base64") != std::string::npos);
  CHECK(code_of(f, "file.write", {{"path", "x"}, {"content", "%%%"}, {"encoding", "base64"}}) == codes::kInvalidArguments);
}

TEST_CASE("text edge cases: unicode, empty, no trailing newline, CRLF, NUL, long lines") {
  SandboxFixture f;
  std::string unicode = "naïve café — 日本語 🎉\nzwei\n";
  write(f, "u.txt", unicode);
  auto r = f.call("file.read", {{"path", "u.txt"}});
  CHECK(r["content"] == unicode);
  CHECK(r["size"] == unicode.size());
  CHECK(r["mime_type"] == "text/plain");

  write(f, "empty.txt", "");
  r = f.call("file.read", {{"path", "empty.txt"}});
  CHECK(r["content"] == "");
  CHECK(r["size"] == 0);
  CHECK(r["truncated"] == false);

  write(f, "nonl.txt", "one\ntwo");
  CHECK(f.call("file.read", {{"path", "nonl.txt"}})["content"] == "one\ntwo");
  CHECK(f.exec("wc -c < nonl.txt")["stdout"] == "7\n");

  write(f, "crlf.txt", "a\r\nb\r\n");
  CHECK(f.call("file.read", {{"path", "crlf.txt"}})["content"] == "a\r\nb\r\n");
  CHECK(f.exec("od -c crlf.txt | head -1")["stdout"].get<std::string>().find("\\r  \\n") != std::string::npos);

  write(f, "nul.txt", std::string("a\0b", 3));
  CHECK(f.exec("wc -c < nul.txt")["stdout"] == "3\n");
  CHECK(code_of(f, "file.read", {{"path", "nul.txt"}}) == codes::kBinaryFile);

  // A 200,000-character line: a page stops at the inline cap, counted for
  // the text and structuredContent together (15,000 characters each), and
  // says where to go on, whatever `length` asks; paging gets every byte back.
  std::string long_line(200'000, 'x');
  long_line += "\n";
  write(f, "long.txt", long_line);
  r = f.call("file.read", {{"path", "long.txt"}});
  CHECK(r["truncated"] == true);
  CHECK(r["content"].get<std::string>().size() == 15'000);
  CHECK(r["next_offset"] == 15'000);
  CHECK(f.call("file.read", {{"path", "long.txt"}, {"length", 1 << 20}})["bytes"] == 15'000);
  CHECK(r["size"] == 200'001);
  CHECK(read_all_text(f, "long.txt", 65'536) == long_line);
}

TEST_CASE("paging at odd offsets never splits a character and loses nothing") {
  SandboxFixture f;
  std::string text;
  for (int i = 0; i < 500; ++i) text += "line " + std::to_string(i) + " é€𝄞\n";
  write(f, "pages.txt", text);
  for (std::size_t length : {1, 3, 7, 333}) {
    INFO("length " << length);
    CHECK(read_all_text(f, "pages.txt", length) == text);
  }
  // An offset inside a character backs up to its first byte.
  std::size_t euro = text.find("€");
  auto r = f.call("file.read", {{"path", "pages.txt"}, {"offset", euro + 1}, {"length", 2}});
  CHECK(r["offset"] == euro);
  CHECK(r["content"] == "€");
  // base64 pages at odd offsets.
  std::string bin;
  for (int i = 0; i < 5000; ++i) bin += static_cast<char>((i * 7) & 0xFF);
  write(f, "pages.bin", base64_encode(bin), {{"encoding", "base64"}});
  std::string back;
  for (std::uint64_t offset = 0;;) {
    auto p = f.call("file.read", {{"path", "pages.bin"}, {"encoding", "base64"}, {"offset", offset}, {"length", 333}});
    back += *base64_decode(p["content"].get<std::string>());
    offset = p["next_offset"];
    if (!p["truncated"].get<bool>()) break;
  }
  CHECK(back == bin);
  r = f.call("file.read", {{"path", "pages.bin"}, {"encoding", "base64"}, {"offset", 4999}});
  CHECK(*base64_decode(r["content"].get<std::string>()) == bin.substr(4999));
  CHECK(f.call("file.read", {{"path", "pages.bin"}, {"encoding", "base64"}, {"offset", 9999}})["content"] == "");
}

TEST_CASE("line ranges") {
  SandboxFixture f;
  write(f, "lines.txt", "1\n2\n3\n4\n5\n");
  auto r = f.call("file.read", {{"path", "lines.txt"}, {"start_line", 2}, {"line_count", 2}});
  CHECK(r["content"] == "2\n3\n");
  CHECK(r["start_line"] == 2);
  CHECK(r["end_line"] == 3);
  CHECK(r["offset"] == 2);
  CHECK(r["truncated"] == true);
  CHECK(f.call("file.read", {{"path", "lines.txt"}, {"start_line", 5}})["content"] == "5\n");
  CHECK(f.call("file.read", {{"path", "lines.txt"}, {"start_line", 9}})["content"] == "");
  CHECK(code_of(f, "file.read", {{"path", "lines.txt"}, {"start_line", 1}, {"offset", 2}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.read", {{"path", "lines.txt"}, {"start_line", 1}, {"encoding", "base64"}}) ==
        codes::kInvalidArguments);
}

TEST_CASE("write modes, parents, kept permissions and read errors") {
  SandboxFixture f;
  CHECK(write(f, "deep/er/x.txt", "1")["created"] == true);
  CHECK(code_of(f, "file.write", {{"path", "deep/er/x.txt"}, {"content", "2"}, {"mode", "create"}}) == codes::kFileExists);
  write(f, "deep/er/x.txt", "23", {{"mode", "append"}});
  CHECK(f.call("file.read", {{"path", "deep/er/x.txt"}})["content"] == "123");
  f.exec("chmod 0751 deep/er/x.txt");
  write(f, "deep/er/x.txt", "new");
  auto st = f.call("file.stat", {{"path", "deep/er/x.txt"}});
  CHECK(st["mode"] == "0751");
  CHECK(st["size"] == 3);
  CHECK(write(f, "/tmp/fresh", "x", {{"sync", true}})["created"] == true);
  CHECK(f.call("file.stat", {{"path", "/tmp/fresh"}})["mode"] == "0644");
  CHECK(code_of(f, "file.write", {{"path", "deep"}, {"content", "x"}}) == codes::kIsDirectory);
  CHECK(code_of(f, "file.write", {{"path", "deep/er/x.txt/under"}, {"content", "x"}}) == codes::kNotDirectory);
  CHECK(code_of(f, "file.read", {{"path", "deep"}}) == codes::kIsDirectory);
  CHECK(code_of(f, "file.read", {{"path", "missing.txt"}}) == codes::kFileNotFound);
  CHECK(code_of(f, "file.read", {{"path", "/dev/null"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.write", {{"path", "x"}, {"content", "x"}, {"mode", "sideways"}}) == codes::kInvalidArguments);
  // No temporary file is left behind.
  CHECK(f.exec("ls -A deep/er")["stdout"] == "x.txt\n");
  // Served on the agent's reader thread: a FIFO must be refused, not waited on.
  f.exec("mkfifo deep/pipe");
  CHECK(code_of(f, "file.read", {{"path", "deep/pipe"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.write", {{"path", "deep/pipe"}, {"content", "x"}, {"mode", "append"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.write", {{"path", "deep/pipe"}, {"content", "x"}}) == codes::kInvalidArguments);
  CHECK(f.call("file.stat", {{"path", "deep/pipe"}})["type"] == "other");
  // A hard link keeps the old content, as after any replace-by-rename.
  f.exec("ln deep/er/x.txt deep/linked");
  write(f, "deep/er/x.txt", "newer");
  CHECK(f.call("file.read", {{"path", "deep/linked"}})["content"] == "new");
  CHECK(f.call("file.read", {{"path", "deep/er/x.txt"}})["content"] == "newer");
}

TEST_CASE("permission errors are reported as such") {
  SandboxFixture f;
  f.exec("echo secret > locked && chmod 000 locked && echo ro > ro && chmod 444 ro && mkdir sealed && chmod 555 sealed");
  CHECK(code_of(f, "file.read", {{"path", "locked"}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.write", {{"path", "ro"}, {"content", "x"}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.edit", {{"path", "ro"}, {"old_string", "ro"}, {"new_string", "rw"}}) == codes::kPermissionDenied);
  CHECK(f.call("file.read", {{"path", "ro"}})["content"] == "ro\n");
  CHECK(code_of(f, "file.write", {{"path", "sealed/new"}, {"content", "x"}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.mkdir", {{"path", "sealed/sub"}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.list", {{"path", "sealed/../locked"}}) == codes::kNotDirectory);
}

TEST_CASE("the file size limit is enforced without harming the agent") {
  ManagerOptions options;
  options.limits.file_size_bytes = 1 << 20;
  SandboxFixture f(options);
  std::string half(600 * 1024, 'a');
  write(f, "big", half);
  CHECK(code_of(f, "file.write", {{"path", "big"}, {"content", half}, {"mode", "append"}}) == codes::kFileTooLarge);
  CHECK(code_of(f, "file.write", {{"path", "big2"}, {"content", half + half}}) == codes::kFileTooLarge);
  CHECK(f.call("file.stat", {{"path", "big"}})["size"] == half.size());
  CHECK(f.exec("echo alive")["stdout"] == "alive\n");
}

TEST_CASE("a concurrent reader never sees a partial write") {
  SandboxFixture f;
  const std::size_t size = 256 * 1024;
  write(f, "atomic.txt", std::string(size, 'A'));
  // The reader runs inside the sandbox, as any program would.
  auto p = f.call("process.start",
                  {{"command", "while :; do c=$(<atomic.txt); n=${#c}; "
                               "if [ $n -ne " + std::to_string(size) + " ]; then echo SHORT $n; fi; "
                               "case ${c:0:1}${c: -1} in AA|BB) ;; *) echo MIXED;; esac; done"}});
  for (int i = 0; i < 60; ++i) write(f, "atomic.txt", std::string(size, i % 2 ? 'A' : 'B'));
  auto out = f.call("process.output", {{"process_id", p["process_id"]}});
  f.call("process.kill", {{"process_id", p["process_id"]}, {"signal", "SIGKILL"}});
  CHECK(out["stdout"] == "");
}

TEST_CASE("a new file appears whole: a concurrent reader never sees it half written") {
  SandboxFixture f;
  const std::size_t size = 256 * 1024;
  f.call("file.mkdir", {{"path", "fresh"}});
  // Any name the reader finds must already hold all its bytes (a file created
  // in place and then written would be seen short).
  // And no temporary name ever shows (new files are linked in from an
  // unnamed O_TMPFILE file; the named fallback would show now and then).
  auto p = f.call("process.start",
                  {{"command", "echo started; shopt -s dotglob; while :; do for n in fresh/*; do [ -f \"$n\" ] || continue; "
                               "case $n in *agentbox-write*) echo TEMP $n; continue;; esac; c=$(<\"$n\"); "
                               "[ ${#c} -eq " + std::to_string(size) + " ] || echo SHORT $n ${#c}; done; done"}});
  REQUIRE(f.call("process.output", {{"process_id", p["process_id"]}, {"pattern", "started"}, {"wait_ms", 10000}})["matched"] == true);
  for (int i = 0; i < 40; ++i) write(f, "fresh/f" + std::to_string(i), std::string(size, 'N'));
  auto out = f.call("process.output", {{"process_id", p["process_id"]}});
  f.call("process.kill", {{"process_id", p["process_id"]}, {"signal", "SIGKILL"}});
  CHECK(out["stdout"] == "started\n");
  CHECK(f.exec("ls -A fresh | wc -l")["stdout"] == "40\n");  // and nothing else: no temporary names left
  CHECK(f.call("file.stat", {{"path", "fresh/f7"}})["mode"] == "0644");
  CHECK(code_of(f, "file.write", {{"path", "fresh/f7"}, {"content", "x"}, {"mode", "create"}}) == codes::kFileExists);
  CHECK(f.call("file.stat", {{"path", "fresh/f7"}})["size"] == size);
}

TEST_CASE("replaced files are released after the reply: no descriptor is kept") {
  SandboxFixture f;
  // The agent is pid 1 in the sandbox and runs as the commands' user.
  auto open_fds = [&f] { return std::stoi(f.exec("ls /proc/1/fd | wc -l")["stdout"].get<std::string>()); };
  write(f, "churn.txt", "0");
  int before = open_fds();
  for (int i = 0; i < 300; ++i) write(f, "churn.txt", std::to_string(i) + std::string(5000, 'c'));
  for (int i = 0; i < 20; ++i)
    f.call("file.edit", {{"path", "churn.txt"}, {"old_string", i % 2 ? "d" : "c"}, {"new_string", i % 2 ? "c" : "d"}, {"replace_all", true}});
  int after = before + 1000;
  for (int tries = 0; tries < 50 && after > before + 2; ++tries) {
    after = open_fds();
    if (after > before + 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(after <= before + 2);
  // A reader that opened the old file keeps reading the old content.
  auto p = f.call("process.start",
                  {{"command", "exec 3<churn.txt; echo opened; read -r line <&3; sleep 0.5; echo ${#line}"}});
  REQUIRE(f.call("process.output", {{"process_id", p["process_id"]}, {"pattern", "opened"}, {"wait_ms", 10000}})["matched"] == true);
  write(f, "churn.txt", "short\n");
  f.call("process.wait", {{"process_id", p["process_id"]}, {"timeout_ms", 10000}});
  CHECK(f.call("process.output", {{"process_id", p["process_id"]}})["stdout"] == "opened\n5003\n");  // "299" and 5000 c
  CHECK(f.call("file.read", {{"path", "churn.txt"}})["content"] == "short\n");
}

TEST_CASE("edits: unique, absent, ambiguous, replace_all, diff") {
  SandboxFixture f;
  write(f, "e.py", "def a():\n    return 1\n\ndef b():\n    return 1\n\ndef c():\n    return 1\n");
  f.exec("chmod 0700 e.py");
  auto r = f.call("file.edit", {{"path", "e.py"}, {"old_string", "def b():\n    return 1"}, {"new_string", "def b():\n    return 2"}});
  CHECK(r["replacements"] == 1);
  std::string diff = r["diff"];
  CHECK(diff.find("-    return 1\n+    return 2\n") != std::string::npos);
  CHECK(diff.find("@@ -1,8 +1,8 @@") != std::string::npos);
  CHECK(f.call("file.stat", {{"path", "e.py"}})["mode"] == "0700");

  std::string ambiguous = message_of(f, "file.edit", {{"path", "e.py"}, {"old_string", "return 1"}, {"new_string", "return 3"}});
  CHECK(ambiguous.find("2 times") != std::string::npos);
  CHECK(ambiguous.find("lines 2, 8") != std::string::npos);
  CHECK(code_of(f, "file.edit", {{"path", "e.py"}, {"old_string", "return 1"}, {"new_string", "x"}}) == codes::kAmbiguousMatch);
  CHECK(code_of(f, "file.edit", {{"path", "e.py"}, {"old_string", "return 9"}, {"new_string", "x"}}) == codes::kNoMatch);
  CHECK(code_of(f, "file.edit", {{"path", "e.py"}, {"old_string", "x"}, {"new_string", "x"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.edit", {{"path", "e.py"}, {"old_string", ""}, {"new_string", "x"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.edit", {{"path", "nope.py"}, {"old_string", "a"}, {"new_string", "b"}}) == codes::kFileNotFound);
  r = f.call("file.edit", {{"path", "e.py"}, {"old_string", "return 1"}, {"new_string", "return 3"}, {"replace_all", true}});
  CHECK(r["replacements"] == 2);
  CHECK(f.exec("grep -c 'return 3' e.py")["stdout"] == "2\n");

  write(f, "w.txt", "one\r\ntwo\r\n");
  CHECK(message_of(f, "file.edit", {{"path", "w.txt"}, {"old_string", "one\ntwo"}, {"new_string", "x"}}).find("CRLF") !=
        std::string::npos);
  write(f, "b.bin", base64_encode(std::string("\0\1\2", 3)), {{"encoding", "base64"}});
  CHECK(code_of(f, "file.edit", {{"path", "b.bin"}, {"old_string", "a"}, {"new_string", "b"}}) == codes::kBinaryFile);
  write(f, "tail.txt", "a\nb");
  r = f.call("file.edit", {{"path", "tail.txt"}, {"old_string", "b"}, {"new_string", "c"}});
  CHECK(r["diff"].get<std::string>().find("+c\n\\ No newline at end of file") != std::string::npos);
}

TEST_CASE("listing: order, hidden entries, depth, caps, symlinks") {
  SandboxFixture f;
  f.exec("mkdir -p t/b/deep/deeper t/a && touch t/z t/.hidden t/b/deep/deeper/f && ln -s /etc t/link && chmod 640 t/z");
  auto r = f.call("file.list", {{"path", "t"}});
  std::vector<std::string> names;
  for (const auto& e : r["entries"]) names.push_back(e["name"]);
  CHECK(names == std::vector<std::string>{"a", "b", "link", "z"});
  CHECK(r["entries"][2]["type"] == "symlink");
  CHECK(r["entries"][2]["target"] == "/etc");
  CHECK(r["entries"][3]["mode"] == "0640");
  CHECK(r["entries"][3]["modified_at"].get<std::string>().back() == 'Z');
  CHECK(f.call("file.list", {{"path", "t"}, {"include_hidden", true}})["entries"].size() == 5);
  r = f.call("file.list", {{"path", "t"}, {"recursive", true}});
  CHECK(r["entries"].size() == 7);
  CHECK(r["entries"][2]["path"] == "/workspace/t/b/deep");
  r = f.call("file.list", {{"path", "t"}, {"recursive", true}, {"max_depth", 2}});
  CHECK(r["entries"].size() == 5);
  r = f.call("file.list", {{"path", "t"}, {"recursive", true}, {"max_entries", 3}});
  CHECK(r["entries"].size() == 3);
  CHECK(r["truncated"] == true);
  // next_cursor pages on in walk order: the pages together are the whole list.
  json all = f.call("file.list", {{"path", "t"}, {"recursive", true}})["entries"], paged = json::array();
  for (json page = r;;) {
    for (const auto& e : page["entries"]) paged.push_back(e["path"]);
    if (!page["truncated"].get<bool>()) break;
    CHECK(page["next_cursor"] == page["entries"].back()["path"]);
    page = f.call("file.list", {{"path", "t"}, {"recursive", true}, {"max_entries", 3}, {"cursor", page["next_cursor"]}});
  }
  json walked = json::array();
  for (const auto& e : all) walked.push_back(e["path"]);
  CHECK(paged == walked);
  CHECK(code_of(f, "file.list", {{"path", "t"}, {"cursor", "/etc/x"}}) == codes::kInvalidArguments);
  // The inline cap bounds a page whatever max_entries says.
  f.exec("mkdir many && (cd many && seq -f 'entry-%05g' 2000 | xargs touch)");
  r = f.call("file.list", {{"path", "many"}, {"max_entries", 10'000}});
  CHECK(r["truncated"] == true);
  CHECK(r["entries"].size() > 50);
  CHECK(r["entries"].size() < 2000);
  // The JSON, plus a text line per entry (tests/clients/sizing.test.mjs measures both).
  std::size_t lines = 0;
  for (const auto& e : r["entries"]) lines += e["path"].get<std::string>().size() + 24;
  CHECK(r.dump().size() + lines <= 30'000);
  CHECK(r.dump().size() + lines > 25'000);
  CHECK(f.call("file.list", json::object())["path"] == "/workspace");
  CHECK(code_of(f, "file.list", {{"path", "t/z"}}) == codes::kNotDirectory);
  CHECK(code_of(f, "file.list", {{"path", "nowhere"}}) == codes::kFileNotFound);
}

TEST_CASE("stat, mkdir, delete and move, with their refusals") {
  SandboxFixture f;
  CHECK(f.call("file.stat", {{"path", "nothing"}})["exists"] == false);
  CHECK(f.call("file.stat", {{"path", "/workspace"}})["type"] == "directory");
  f.exec("ln -s a-missing dangling && ln -s self self2 && ln -s self2 self");
  auto s = f.call("file.stat", {{"path", "dangling"}});
  CHECK(s["type"] == "symlink");
  CHECK(s["target"] == "a-missing");
  CHECK(s["target_type"] == "missing");
  CHECK(f.call("file.stat", {{"path", "self"}})["target_type"] == "loop");

  CHECK(f.call("file.mkdir", {{"path", "m"}})["created"] == true);
  CHECK(code_of(f, "file.mkdir", {{"path", "m"}}) == codes::kFileExists);
  CHECK(f.call("file.mkdir", {{"path", "m"}, {"recursive", true}})["created"] == false);
  CHECK(code_of(f, "file.mkdir", {{"path", "n/o/p"}}) == codes::kFileNotFound);
  CHECK(f.call("file.mkdir", {{"path", "n/o/p"}, {"recursive", true}})["created"] == true);
  CHECK(f.call("file.mkdir", {{"path", "/workspace"}, {"recursive", true}})["created"] == false);

  write(f, "n/o/p/file", "x");
  CHECK(code_of(f, "file.delete", {{"path", "n"}}) == codes::kIsDirectory);
  CHECK(f.call("file.delete", {{"path", "n"}, {"recursive", true}})["entries"] == 4);
  CHECK(code_of(f, "file.delete", {{"path", "n"}}) == codes::kFileNotFound);
  for (const char* root : {"/workspace", "/workspace/", "/workspace/.", "m/..", "/tmp", "/home/user"})
    CHECK(code_of(f, "file.delete", {{"path", root}, {"recursive", true}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.delete", {{"path", "/etc/passwd"}}) == codes::kPathOutsideSandbox);
  // A link to a directory is removed as a link; its target stays.
  f.exec("mkdir keep && touch keep/k && ln -s keep keeplink");
  f.call("file.delete", {{"path", "keeplink"}, {"recursive", true}});
  CHECK(f.exec("ls keep")["stdout"] == "k\n");

  write(f, "from.txt", "from");
  write(f, "to.txt", "to");
  CHECK(code_of(f, "file.move", {{"from", "from.txt"}, {"to", "to.txt"}}) == codes::kFileExists);
  CHECK(f.call("file.read", {{"path", "to.txt"}})["content"] == "to");
  f.call("file.move", {{"from", "from.txt"}, {"to", "to.txt"}, {"overwrite", true}});
  CHECK(f.call("file.read", {{"path", "to.txt"}})["content"] == "from");
  CHECK(code_of(f, "file.move", {{"from", "from.txt"}, {"to", "x"}}) == codes::kFileNotFound);
  CHECK(code_of(f, "file.move", {{"from", "keep"}, {"to", "keep/inside"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.move", {{"from", "/workspace"}, {"to", "/tmp/ws"}}) == codes::kPermissionDenied);
  CHECK(code_of(f, "file.move", {{"from", "to.txt"}, {"to", "/usr/to.txt"}}) == codes::kPathOutsideSandbox);
  // Across mounts (/workspace and /tmp are separate): a copy, then a delete.
  f.call("file.move", {{"from", "keep"}, {"to", "/tmp/moved/keep"}});
  CHECK(f.exec("ls /tmp/moved/keep; ls keep 2>&1 | wc -l")["stdout"] == "k\n1\n");
  f.call("file.move", {{"from", "to.txt"}, {"to", "/home/user/to.txt"}});
  CHECK(f.call("file.read", {{"path", "/home/user/to.txt"}})["content"] == "from");
}

TEST_CASE("search: matches, glob, binary and .git skipped, cap, bad patterns") {
  SandboxFixture f;
  f.exec("mkdir -p s/sub s/.git && printf 'alpha\\nbeta TODO\\ngamma\\n' > s/a.py && printf 'TODO one\\r\\n' > s/sub/b.txt"
         " && printf 'TODO\\0bin' > s/c.bin && echo TODO > s/.git/config && echo todo > s/.hidden");
  auto r = f.call("file.search", {{"pattern", "TODO"}, {"path", "s"}});
  REQUIRE(r["matches"].size() == 2);
  CHECK(r["matches"][0] == json{{"path", "/workspace/s/a.py"}, {"line", 2}, {"text", "beta TODO"}});
  CHECK(r["matches"][1]["text"] == "TODO one");
  CHECK(r["skipped_binary"] == 1);
  CHECK(f.call("file.search", {{"pattern", "todo"}, {"path", "s"}, {"case_insensitive", true}})["matches"].size() == 3);
  CHECK(f.call("file.search", {{"pattern", "TODO"}, {"path", "s"}, {"glob", "*.txt"}})["matches"].size() == 1);
  CHECK(f.call("file.search", {{"pattern", "TODO"}, {"path", "s"}, {"glob", "sub/*"}})["matches"].size() == 1);
  // '*' stays within a directory; '**' crosses any number of them; braces pick alternatives.
  f.exec("mkdir -p s/sub/deep && echo TODO > s/sub/deep/d.txt && echo TODO > s/sub/deep/e.md");
  auto n = [&](const char* glob) {
    return f.call("file.search", {{"pattern", "TODO"}, {"path", "s"}, {"glob", glob}})["matches"].size();
  };
  CHECK(n("sub/*") == 1);
  CHECK(n("sub/**/*.txt") == 2);
  CHECK(n("**/*.txt") == 2);
  CHECK(n("**/deep/*") == 2);
  CHECK(n("*.{txt,md}") == 3);
  CHECK(n("**/*.{py,md}") == 2);
  CHECK(n("sub/{deep/e.md,b.txt}") == 2);
  CHECK(n("*.{unclosed") == 0);
  std::string many;  // 2^10 alternatives
  for (int i = 0; i < 10; ++i) many += "{a,b}";
  CHECK(code_of(f, "file.search", {{"pattern", "x"}, {"path", "s"}, {"glob", many}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.search", {{"pattern", "x"}, {"path", "s"}, {"glob", "**/a/**/b/**/c/**/d/**/e"}}) ==
        codes::kInvalidArguments);
  CHECK(f.call("file.search", {{"pattern", "^(alpha|gamma)$"}, {"path", "s/a.py"}})["matches"].size() == 2);
  f.exec("for i in $(seq 50); do echo hit; done > s/many");
  r = f.call("file.search", {{"pattern", "hit"}, {"path", "s"}, {"max_results", 10}});
  CHECK(r["matches"].size() == 10);
  CHECK(r["truncated"] == true);
  CHECK(r["next_cursor"] == "/workspace/s/many:10");
  std::size_t found = 0;
  for (json page = r;;) {
    found += page["matches"].size();
    if (!page["truncated"].get<bool>()) break;
    page = f.call("file.search", {{"pattern", "hit"}, {"path", "s"}, {"max_results", 10}, {"cursor", page["next_cursor"]}});
  }
  CHECK(found == 50);
  CHECK(code_of(f, "file.search", {{"pattern", "hit"}, {"path", "s"}, {"cursor", "no line"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.search", {{"pattern", "(unclosed"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.search", {{"pattern", "x"}, {"path", "nowhere"}}) == codes::kFileNotFound);
}

TEST_CASE("symlinks resolve as inside the sandbox and never reach the host") {
  SandboxFixture f;
  std::string host_home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  f.exec("ln -s /etc/shadow shadow && ln -s " + host_home + "/.bashrc hosthome && ln -s " + host_home +
         " homedir && ln -s loop2 loop1 && ln -s loop1 loop2 && ln -s /tmp tmplink && ln -s newfile dangling"
         " && ln -s /usr/bin usrbin");
  // There is no /etc/shadow inside: host /etc is bound only in part (host_etc.cpp).
  CHECK(code_of(f, "file.read", {{"path", "shadow"}}) == codes::kFileNotFound);
  CHECK(code_of(f, "file.write", {{"path", "shadow"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  CHECK(code_of(f, "file.read", {{"path", "hosthome"}}) == codes::kFileNotFound);
  CHECK(code_of(f, "file.list", {{"path", "homedir"}}) == codes::kFileNotFound);
  CHECK(code_of(f, "file.read", {{"path", "loop1"}}) == codes::kSymlinkLoop);
  CHECK(code_of(f, "file.write", {{"path", "loop1"}, {"content", "x"}}) == codes::kSymlinkLoop);
  CHECK(code_of(f, "file.write", {{"path", "usrbin/evil"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  // Writes through links that stay inside the writable areas work, and the
  // link stays a link.
  CHECK(write(f, "tmplink/via-link", "ok")["path"] == "/tmp/via-link");
  CHECK(write(f, "dangling", "made")["path"] == "/workspace/newfile");
  CHECK(f.call("file.stat", {{"path", "dangling"}})["type"] == "symlink");
  CHECK(f.call("file.read", {{"path", "newfile"}})["content"] == "made");
}

TEST_CASE("path tricks: traversal, /proc/self/root, NUL bytes, long names, sessions") {
  SandboxFixture f;
  // ../../.. from /workspace reaches the sandbox's own /etc, read-only.
  auto passwd = f.call("file.read", {{"path", "../../../../etc/passwd"}})["content"].get<std::string>();
  std::ifstream host("/etc/passwd");
  std::string host_passwd((std::istreambuf_iterator<char>(host)), std::istreambuf_iterator<char>());
  CHECK(passwd != host_passwd);
  CHECK(code_of(f, "file.write", {{"path", "../../../etc/passwd"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  CHECK(code_of(f, "file.write", {{"path", "/workspace/../etc/x"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  CHECK(code_of(f, "file.write", {{"path", "/run/agentbox/x"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  CHECK(code_of(f, "file.write", {{"path", "/proc/self/root/etc/x"}, {"content", "x"}}) == codes::kPathOutsideSandbox);
  CHECK(code_of(f, "file.read", {{"path", "/proc/self/root/etc/shadow"}}) == codes::kFileNotFound);
  CHECK(write(f, "/proc/self/root/workspace/p.txt", "via proc")["path"] == "/workspace/p.txt");
  CHECK(code_of(f, "file.read", {{"path", std::string("a\0/etc/passwd", 13)}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.write", {{"path", std::string("a\0b", 3)}, {"content", "x"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.read", {{"path", ""}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.write", {{"path", std::string(300, 'n')}, {"content", "x"}}) == codes::kInvalidArguments);
  CHECK(code_of(f, "file.read", {{"path", std::string(5000, 'n')}}) == codes::kInvalidArguments);
  CHECK(write(f, std::string(255, 'n'), "max name")["bytes_written"] == 8);

  // Relative paths follow the session's working directory.
  f.exec("mkdir -p /workspace/proj && cd /workspace/proj");
  CHECK(write(f, "rel.txt", "r")["path"] == "/workspace/proj/rel.txt");
  f.call("session.create", {{"name", "other"}, {"cwd", "/tmp"}});
  CHECK(write(f, "rel.txt", "o", {{"session", "other"}})["path"] == "/tmp/rel.txt");
  CHECK(code_of(f, "file.read", {{"path", "x"}, {"session", "ghost"}}) == codes::kSessionNotFound);
}

TEST_CASE("big files are written in chunks and read in pages") {
  SandboxFixture f;
  const std::size_t chunk = 1 << 20, chunks = 16;
  std::string block;
  for (std::size_t i = 0; i < chunk; ++i) block += static_cast<char>((i * 31 + i / 251) & 0xFF);
  std::string encoded = base64_encode(block);
  for (std::size_t i = 0; i < chunks; ++i)
    write(f, "big.bin", encoded, {{"encoding", "base64"}, {"mode", i == 0 ? "overwrite" : "append"}});
  CHECK(f.call("file.stat", {{"path", "big.bin"}})["size"] == chunk * chunks);
  // A base64 page is 15,000 characters (11,250 bytes), shown in the text and
  // in structuredContent: about 1,500 pages.
  const std::size_t page = 11'250;
  std::uint64_t offset = 0;
  std::size_t pages = 0;
  bool same = true;
  for (;;) {
    auto r = f.call("file.read", {{"path", "big.bin"}, {"encoding", "base64"}, {"offset", offset}, {"length", chunk}});
    std::string bytes = *base64_decode(r["content"].get<std::string>());
    for (std::size_t i = 0; same && i < bytes.size(); ++i) same = bytes[i] == block[(offset + i) % chunk];
    offset = r["next_offset"];
    ++pages;
    if (!r["truncated"].get<bool>()) break;
  }
  CHECK(same);
  CHECK(offset == chunk * chunks);
  CHECK(pages == (chunk * chunks + page - 1) / page);
  CHECK(f.call("file.read", {{"path", "big.bin"}, {"encoding", "base64"}, {"length", 4 * chunk}})["bytes"] == page);
}
