#include "agent/services.h"

#include "agent/file_io.h"
#include "agent/processes.h"
#include "contract/errors.h"
#include "os/errno_text.h"
#include "rpc/json_parse.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::agent {

using json = nlohmann::json;

namespace {

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw SandboxError(codes::kInvalidArguments, "the services file " + path + " " + why +
                                                   "; no service was started (process_start with restart "
                                                   "\"on-restore\" writes it again)");
}

// One entry of the file; anything else is refused with its reason.
Service parse_service(const json& j, const std::string& path) {
  auto text = [&](const char* name) -> std::string {
    if (!j.is_object() || !j.contains(name) || !j[name].is_string()) unreadable(path, std::string("has an entry without a string ") + name);
    return j[name].get<std::string>();
  };
  Service s;
  s.process_id = text("process_id");
  s.command = text("command");
  s.cwd = text("cwd");
  s.session_state = text("session_state");
  if (s.process_id.rfind("proc-", 0) != 0 || s.process_id.size() > 32 ||
      s.process_id.find_first_not_of("0123456789", 5) != std::string::npos || s.process_id.size() == 5)
    unreadable(path, "has an entry whose process_id is not proc-N");
  if (s.command.empty() || s.cwd.empty() || s.cwd[0] != '/') unreadable(path, "has an entry without a command or an absolute cwd");
  if (s.session_state.size() > ServiceFile::kMaxStateBytes) unreadable(path, "has a session state over 256 KiB");
  if (j.contains("env")) {
    if (!j["env"].is_object()) unreadable(path, "has an entry whose env is not an object");
    for (const auto& [name, value] : j["env"].items()) {
      if (!value.is_string() || !valid_env_name(name)) unreadable(path, "has an entry with an invalid variable");
      s.env.emplace_back(name, value.get<std::string>());
    }
  }
  return s;
}

json to_json(const Service& s) {
  json env = json::object();
  for (const auto& [name, value] : s.env) env[name] = value;
  return {{"process_id", s.process_id}, {"command", s.command}, {"cwd", s.cwd}, {"env", env},
          {"session_state", s.session_state}};
}

// Reads fd to its end into out; false (and stops) once out holds more than cap.
bool read_capped(int fd, std::size_t cap, std::string& out) {
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out.append(buffer, static_cast<std::size_t>(n));
    if (out.size() > cap) return false;
  }
}

std::string read_bounded(const std::string& path, bool& absent) {
  absent = false;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) {
    absent = true;
    return "";
  }
  if (fd < 0) unreadable(path, "cannot be opened (" + os::errno_text("open", errno) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    unreadable(path, "is not a regular file");
  }
  std::string data;
  bool whole = read_capped(fd, ServiceFile::kMaxFileBytes, data);
  close(fd);
  if (!whole) unreadable(path, "is over 4 MiB");
  return data;
}

}  // namespace

std::string sandbox_home(const std::vector<std::string>& environment) {
  for (const auto& entry : environment)
    if (entry.rfind("HOME=", 0) == 0 && entry.size() > 6) return entry.substr(5);
  return "/home/user";
}

std::string read_session_state(const std::string& path) {
  std::string text;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;  // a session that never saved any: nothing to source
  bool whole = read_capped(fd, ServiceFile::kMaxStateBytes, text);
  close(fd);
  if (!whole)
    throw SandboxError(codes::kInvalidArguments,
                       "the session's state (its functions and variables) is over 256 KiB, too large to keep for a "
                       "restart; start the service from a session with less state, or without restart");
  return text;
}

ServiceFile::ServiceFile(std::string home) : path_(std::move(home) + "/.local/state/agentbox/services.json") {}

std::vector<Service> ServiceFile::load() const {
  bool absent = false;
  std::string text = read_bounded(path_, absent);
  if (absent) return {};
  auto parsed = rpc::parse_json(text);
  if (!parsed.ok() || !parsed.value.is_object() || !parsed.value.contains("services") ||
      !parsed.value["services"].is_array())
    unreadable(path_, "is not {\"services\": [...]}");
  const json& list = parsed.value["services"];
  if (list.size() > kMaxServices) unreadable(path_, "lists more than 64 services");
  std::vector<Service> services;
  for (const auto& entry : list) services.push_back(parse_service(entry, path_));
  return services;
}

void ServiceFile::put(const Service& s) {
  std::vector<Service> services;
  try {
    services = load();
  } catch (const SandboxError&) {
    // A damaged file is replaced: this start is what the caller asked for now.
  }
  std::erase_if(services, [&](const Service& old) { return old.process_id == s.process_id; });
  if (services.size() >= kMaxServices)
    throw SandboxError(codes::kInvalidArguments, "this sandbox already keeps 64 services; process_kill one first");
  services.push_back(s);
  save(services);
}

bool ServiceFile::remove(const std::string& process_id) {
  std::vector<Service> services;
  try {
    services = load();
  } catch (const SandboxError&) {
    return false;
  }
  auto before = services.size();
  std::erase_if(services, [&](const Service& s) { return s.process_id == process_id; });
  if (services.size() == before) return false;
  save(services);
  return true;
}

void ServiceFile::save(const std::vector<Service>& services) const {
  // ~/.local/state/agentbox, made as needed (the sandbox's own directories).
  std::string dir = path_.substr(0, path_.rfind('/'));
  for (std::size_t at = 1; (at = dir.find('/', at)) != std::string::npos; ++at) mkdir(dir.substr(0, at).c_str(), 0755);
  mkdir(dir.c_str(), 0700);
  json list = json::array();
  for (const auto& s : services) list.push_back(to_json(s));
  // Replaced by rename, so a reader never sees half a file.
  replace_file(path_, json({{"services", list}}).dump(1) + "\n", mode_t{0600}, /*sync=*/false, /*no_replace=*/false);
}

}  // namespace agentbox::agent
