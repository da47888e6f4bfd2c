// The services file (agent/services.h) is written by the agent and by
// whatever runs in the sandbox: reading it trusts nothing. A file of any
// other shape starts nothing and names what is wrong; put and remove keep
// the rest.
#include "agent/services.h"

#include "contract/errors.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox;
using namespace agentbox::agent;
namespace fs = std::filesystem;

namespace {

struct Home {
  Home() {
    char tmpl[] = "/tmp/agentbox-services-test-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~Home() { fs::remove_all(dir); }
  void write(const std::string& text) const {
    fs::create_directories(dir / ".local/state/agentbox");
    std::ofstream(dir / ".local/state/agentbox/services.json") << text;
  }
  fs::path dir;
};

Service service(const std::string& id) {
  Service s;
  s.process_id = id;
  s.command = "python3 -m http.server";
  s.cwd = "/workspace/www";
  s.env = {{"GREETING", "it's \"quoted\""}};
  s.session_state = "export A=1\nf() { echo f; }\n";
  return s;
}

std::string load_error(const ServiceFile& file) {
  try {
    file.load();
  } catch (const SandboxError& e) {
    CHECK(e.code() == codes::kInvalidArguments);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("services file: put, load and remove keep each entry whole", "[services]") {
  Home home;
  ServiceFile file(home.dir);
  CHECK(file.load().empty());  // no file: no services
  file.put(service("proc-1"));
  file.put(service("proc-7"));
  Service changed = service("proc-1");
  changed.command = "sleep 1";
  file.put(changed);  // replaces, keeps the order of the others
  auto loaded = file.load();
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].process_id == "proc-7");
  CHECK(loaded[1].command == "sleep 1");
  CHECK(loaded[0].env == service("x").env);
  CHECK(loaded[0].session_state == service("x").session_state);
  CHECK(file.remove("proc-7"));
  CHECK_FALSE(file.remove("proc-7"));
  CHECK(file.load().size() == 1);
}

TEST_CASE("services file: what the sandbox can write there starts nothing and says why", "[services]") {
  Home home;
  ServiceFile file(home.dir);
  const std::string good = R"({"process_id":"proc-1","command":"true","cwd":"/workspace","session_state":""})";
  struct Case {
    std::string text;
    std::string says;
  } cases[] = {
      {"not json", "is not {\"services\": [...]}"},
      {"[]", "is not {\"services\": [...]}"},
      {R"({"services": 5})", "is not {\"services\": [...]}"},
      {R"({"services": [7]})", "without a string process_id"},
      {R"({"services": [{"process_id":"../../etc","command":"true","cwd":"/w","session_state":""}]})", "is not proc-N"},
      {R"({"services": [{"process_id":"proc-","command":"true","cwd":"/w","session_state":""}]})", "is not proc-N"},
      {R"({"services": [{"process_id":"proc-1","command":"","cwd":"/w","session_state":""}]})", "absolute cwd"},
      {R"({"services": [{"process_id":"proc-1","command":"x","cwd":"rel","session_state":""}]})", "absolute cwd"},
      {R"({"services": [{"process_id":"proc-1","command":"x","cwd":"/w","session_state":"","env":{"A B":"1"}}]})", "invalid variable"},
      {R"({"services": [{"process_id":"proc-1","command":"x","cwd":"/w","session_state":"","env":{"A":1}}]})", "invalid variable"},
      {R"({"services": [{"process_id":"proc-1","command":"x","cwd":"/w","session_state":"","env":[]}]})", "env is not an object"},
      {"{\"services\": [" + std::string(100000, '[') + "]}", "is not {\"services\": [...]}"},  // too deep to parse
  };
  for (const auto& c : cases) {
    INFO(c.text.substr(0, 120));
    home.write(c.text);
    std::string error = load_error(file);
    CHECK(error.find(c.says) != std::string::npos);
    CHECK(error.find("no service was started") != std::string::npos);
  }
  std::string many = R"({"services": [)";
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + good;
  home.write(many + "]}");
  CHECK(load_error(file).find("more than 64") != std::string::npos);
  home.write(R"({"services": [{"process_id":"proc-1","command":"x","cwd":"/w","session_state":")" +
             std::string(300 * 1024, 'a') + "\"}]}");
  CHECK(load_error(file).find("over 256 KiB") != std::string::npos);
  home.write(std::string(5 * 1024 * 1024, ' '));
  CHECK(load_error(file).find("over 4 MiB") != std::string::npos);
  // Not a regular file: a FIFO would block the agent, a symlink could point anywhere.
  fs::remove(home.dir / ".local/state/agentbox/services.json");
  REQUIRE(mkfifo((home.dir / ".local/state/agentbox/services.json").c_str(), 0600) == 0);
  CHECK(load_error(file).find("is not a regular file") != std::string::npos);
  fs::remove(home.dir / ".local/state/agentbox/services.json");
  fs::create_symlink("/etc/passwd", home.dir / ".local/state/agentbox/services.json");
  CHECK(load_error(file).find("cannot be opened") != std::string::npos);
  // A damaged file is replaced by the next service put there.
  home.write("garbage");
  fs::remove(home.dir / ".local/state/agentbox/services.json");
  home.write("garbage");
  file.put(service("proc-2"));
  CHECK(file.load().size() == 1);
}
