// The network policy of a sandbox in proxy mode (docs/design.md section 10,
// "Network by policy"): which hosts its proxy may reach, which names resolve
// where, and which credentials are added at egress. The policy is the
// user's (`--network-policy FILE`), never the model's: nothing here widens it.
//
// File shape (JSON):
//   { "allow":   ["pypi.org", "*.pythonhosted.org", "registry.npmjs.org:443", "10.1.2.3:8080"],
//     "deny":    ["169.254.169.254", "10.0.0.0/8", "internal.example.org"],
//     "secrets": [{ "host": "api.github.com", "header": "Authorization",
//                   "value_from_env": "GITHUB_TOKEN", "format": "Bearer {}" }],
//     "resolve": { "git.internal.test": "127.0.0.1" },
//     "conversations": { "<conversation id>": { "allow": [...], "deny": [...],
//                                               "secrets": [...], "resolve": {...} } } }
// A conversation's entry adds to the top-level lists (it never removes a deny).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace agentbox::network {

// Thrown by parse() and load(): a sentence naming the file, the entry and what is wrong.
class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One `allow` or `deny` entry as written: "host", "*.suffix", "host:port",
// "1.2.3.4", "[::1]:8080", or (deny only) a CIDR "10.0.0.0/8".
struct Rule {
  std::string text;                 // as written, for reasons ("allowed by 'pypi.org'")
  std::string host;                 // lower case, no trailing dot; for "*.x" the suffix "x"
  bool wildcard = false;            // "*.suffix": any name ending in ".suffix" (not suffix itself)
  std::optional<std::uint16_t> port;  // none: 80 and 443 for allow, any port for deny
  bool is_address = false;          // an IP literal or a CIDR (host holds the canonical address)
  int prefix = -1;                  // CIDR prefix length, -1 for an exact address
};

struct Secret {
  std::string host;    // exact name, lower case (no wildcard: a credential goes to one host)
  std::string header;  // e.g. "Authorization"
  std::string env;     // the server's environment variable holding the value
  std::string format;  // "{}" replaced by the value; default "{}"
  std::string value;   // read from the server's environment when the policy is made
  // What the sandbox sees in the variable `env`: "agentbox-secret:" + env.
  std::string placeholder() const { return "agentbox-secret:" + env; }
  std::string header_value() const;  // format with "{}" replaced by value
};

struct Decision {
  bool allowed = false;
  std::string rule;    // the entry that decided, as written ("" when no entry matched)
  std::string reason;  // a sentence for the model: "api.example.com:443 is not in the allowlist"
};

// The policy in force for one conversation (the top level merged with its entry).
class Policy {
 public:
  // Checks a request's target as the client named it (CONNECT host:port, or
  // the absolute URL's host and port). IP literals are denied unless an
  // allow entry names that address; deny wins over allow.
  Decision check(std::string_view host, std::uint16_t port) const;
  // Checks an address the name resolved to against the deny entries that are
  // addresses or CIDRs (a name pointing at 169.254.169.254 is still denied).
  Decision check_address(std::string_view address, std::string_view host, std::uint16_t port) const;
  // The pinned address for a name (`resolve`), if any.
  std::optional<std::string> pinned(std::string_view host) const;
  // The secret for exactly this host, if any.
  const Secret* secret_for(std::string_view host) const;
  const std::vector<Secret>& secrets() const { return secrets_; }
  // The policy as JSON (the file's shape without "conversations"; secret
  // values never appear, only their host, header and variable name).
  nlohmann::json describe() const;

  // Normalises a host as a client wrote it: lower case, trailing dot and
  // IPv6 brackets removed. Empty for a host no rule could name.
  static std::string normalise_host(std::string_view host);
  static bool is_ip_literal(std::string_view host);

 private:
  friend class PolicyFile;
  std::vector<Rule> allow_;
  std::vector<Rule> deny_;
  std::vector<Secret> secrets_;
  std::map<std::string, std::string, std::less<>> resolve_;
};

// The whole file: the top-level policy and each conversation's additions.
class PolicyFile {
 public:
  // Throws PolicyError. `getenv` looks secrets up (the server's environment by default).
  static PolicyFile parse(const nlohmann::json& json, const std::string& source_name,
                          const std::function<std::optional<std::string>(const std::string&)>& getenv = {});
  static PolicyFile load(const std::string& path);  // reads and parses a file; PolicyError
  // The policy for a conversation (the top level when it has no entry).
  std::shared_ptr<const Policy> for_conversation(const std::string& conversation) const;
  // Every secret's variable name, top level and conversations, sorted and
  // unique: each box's environment holds their placeholders.
  std::vector<std::string> secret_variables() const;

 private:
  std::shared_ptr<const Policy> top_;  // merged at parse: no file is read again
  std::map<std::string, std::shared_ptr<const Policy>, std::less<>> conversations_;
};

}  // namespace agentbox::network
