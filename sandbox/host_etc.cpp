#include "sandbox/host_etc.h"

#include <algorithm>
#include <dirent.h>
#include <filesystem>
#include <fnmatch.h>
#include <sys/stat.h>

namespace agentbox::sandbox {

namespace {

// Top-level names (fnmatch patterns). Not here on purpose: shadow, gshadow,
// sudoers, machine-id, ssh/ (host keys; only the client config is bound),
// pip.conf and other registry configs (may hold tokens), environment,
// ld.so.preload (a host's preloads are not the box's), pam, systemd, cron.
const char* const kHostEtc[] = {
    // name service, network configuration
    "nsswitch.conf", "host.conf", "resolv.conf", "gai.conf", "services", "protocols", "networks", "rpc",
    "ethertypes",
    // TLS: Debian ssl/ and ca-certificates*, Fedora pki/ and crypto-policies/
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies", "gnutls",
    // the dynamic loader and Debian's /usr/bin -> /etc/alternatives links
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
    // time, locale, the system's identity
    "localtime", "timezone", "locale.alias", "locale.conf", "os-release", "lsb-release",
    "debian_version", "redhat-release", "system-release",
    // shells and the usual tools' system configs
    "bash.bashrc", "bashrc", "profile", "profile.d", "inputrc", "shells", "environment.d", "mime.types",
    "magic", "magic.mime", "gitconfig", "gitattributes", "manpath.config", "groff", "terminfo", "vim",
    "nanorc", "wgetrc", "xattr.conf", "gdb", "fonts", "mailcap", "python3", "python3.*", "matplotlibrc", "perl",
    "java-*", "ImageMagick-*", "R", "mtab",
};

// Single files of directories that also hold daemons' settings and host keys, which are not bound whole.
const char* const kHostEtcFiles[] = {"default/locale", "ssh/ssh_config", "ssh/ssh_config.d"};

}  // namespace

bool host_etc_binds(const std::string& name) {
  return std::any_of(std::begin(kHostEtc), std::end(kHostEtc),
                     [&name](const char* pattern) { return fnmatch(pattern, name.c_str(), FNM_PERIOD) == 0; });
}


void add_host_etc(std::vector<std::string>& argv, const std::vector<std::string>& generated,
                  const std::string& host_etc) {
  DIR* dir = opendir(host_etc.c_str());
  if (!dir) return;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == ".." || !host_etc_binds(name)) continue;
    if (std::find(generated.begin(), generated.end(), name) != generated.end()) continue;
    names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());  // the same plan for the same host
  for (const auto& name : names) {
    std::string host = host_etc + "/" + name, inside = "/etc/" + name;
    struct stat st;
    if (lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      auto target = std::filesystem::read_symlink(host, ec);
      if (!ec) argv.insert(argv.end(), {"--symlink", target.string(), inside});
    } else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      argv.insert(argv.end(), {"--ro-bind-try", host, inside});
    }
  }
  for (const char* file : kHostEtcFiles)
    argv.insert(argv.end(), {"--ro-bind-try", host_etc + "/" + file, std::string("/etc/") + file});
}

}  // namespace agentbox::sandbox
