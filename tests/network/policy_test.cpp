// network/policy: parsing a policy file (every error names the file, the
// entry and the problem), matching hosts and ports, deny over allow, IP
// literals (including the IPv4 forms browsers and curl accept), resolved
// addresses against CIDR denies, conversation merges and secrets.
#include "network/policy.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

using agentbox::network::Policy;
using agentbox::network::PolicyError;
using agentbox::network::PolicyFile;
using json = nlohmann::json;

namespace {

const std::string kSource = "/etc/p.json";

// The environment the tests' secrets are read from, instead of the server's.
std::optional<std::string> test_env(const std::string& name) {
  static const std::map<std::string, std::string> env = {
      {"GITHUB_TOKEN", "ghp_secretvalue"}, {"EMPTY", ""}, {"WITH_CR", "abc\rdef"},
      {"WITH_LF", "abc\nX-Injected: 1"},  {"WITH_NUL", std::string("ab\0c", 4)}};
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<const Policy> policy(const json& document) {
  return PolicyFile::parse(document, kSource, test_env).for_conversation("");
}

// The PolicyError parse() throws for `document` (fails the test when none is thrown).
std::string error_of(const json& document) {
  try {
    PolicyFile::parse(document, kSource, test_env);
  } catch (const PolicyError& e) {
    return e.what();
  }
  FAIL("no PolicyError for " << document.dump());
  return "";
}

bool allowed(const Policy& p, std::string_view host, std::uint16_t port) { return p.check(host, port).allowed; }

json secret(const std::string& host, const std::string& header, const std::string& env) {
  return {{"host", host}, {"header", header}, {"value_from_env", env}};
}

// A file in a fresh temporary directory, removed with it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "policy_test.XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()));
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("a bad entry is named with the file, its place and the problem", "[policy]") {
  // The policy as JSON text, and what its error must say.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"allow": ["a.test", "b.test", "*."]})",
       "policy /etc/p.json: allow[2] \"*.\": nothing after \"*.\""},
      {R"({"allowed": []})",
       "policy /etc/p.json: unknown key \"allowed\""},
      {R"({"allow": "pypi.org"})",
       "allow: must be an array"},
      {R"({"allow": [42]})",
       "allow[0]: must be a string"},
      {R"({"allow": [""]})",
       "allow[0] \"\": an entry may not be empty"},
      {R"({"allow": ["pypi.org:0"]})",
       "allow[0] \"pypi.org:0\": port \"0\" is not a number from 1 to 65535"},
      {R"({"allow": ["pypi.org:65536"]})",
       "allow[0] \"pypi.org:65536\": port \"65536\""},
      {R"({"allow": ["pypi.org:http"]})",
       "allow[0] \"pypi.org:http\": port \"http\""},
      {R"({"allow": ["pypi.org:"]})",
       "allow[0] \"pypi.org:\": port \"\""},
      {R"({"allow": ["[::1]x"]})",
       "allow[0] \"[::1]x\": unexpected"},
      {R"({"allow": ["[::1"]})",
       "allow[0] \"[::1\": \"[\" without \"]\""},
      {R"({"allow": ["10.0.0.0/8"]})",
       "allow[0] \"10.0.0.0/8\": a CIDR range may only be denied"},
      {R"({"deny": ["10.0.0.0/33"]})",
       "deny[0] \"10.0.0.0/33\": prefix length \"33\" is not a number from 0 to 32"},
      {R"({"deny": ["fd00::/129"]})",
       "deny[0] \"fd00::/129\": prefix length"},
      {R"({"deny": ["10.0.0/8"]})",
       "deny[0] \"10.0.0/8\": not an IP address in standard form"},
      {R"({"deny": ["10.0.0.0/x"]})",
       "deny[0] \"10.0.0.0/x\": prefix length \"x\""},
      {R"({"allow": ["a.*.test"]})",
       "allow[0] \"a.*.test\": a wildcard may only be a leading \"*.\""},
      {R"({"allow": ["*pypi.org"]})",
       "allow[0] \"*pypi.org\": a wildcard may only be a leading"},
      {R"({"allow": ["*.*.org"]})",
       "allow[0] \"*.*.org\": a wildcard may only be a leading"},
      {R"({"allow": ["*.10.0.0.1"]})",
       "allow[0] \"*.10.0.0.1\": a wildcard covers names, not IP addresses"},
      {R"({"allow": ["a..b"]})",
       "allow[0] \"a..b\": not a valid host name"},
      {R"({"allow": ["a b.test"]})",
       "allow[0] \"a b.test\": not a valid host name"},
      {R"({"allow": ["127.000.000.001"]})",
       "allow[0] \"127.000.000.001\": not an IP address in standard form"},
      {R"({"deny": ["0x7f.1"]})",
       "deny[0] \"0x7f.1\": not an IP address in standard form"},
      {R"({"resolve": {"git.internal.test": "1.2.3"}})",
       "resolve[\"git.internal.test\"]: \"1.2.3\" is not an IP"},
      {R"({"resolve": {"git.internal.test": "git.example.org"}})",
       "resolve[\"git.internal.test\"]: \"git.example.org\""},
      {R"({"resolve": {"git.internal.test": 7}})",
       "resolve[\"git.internal.test\"]: must be an IP address string"},
      {R"({"resolve": {"*.internal.test": "10.0.0.1"}})",
       "resolve[\"*.internal.test\"]: a pinned name cannot be a wildcard"},
      {R"({"resolve": {"10.0.0.1": "10.0.0.2"}})",
       "resolve[\"10.0.0.1\"]: an IP address is not resolved"},
      {R"({"resolve": {"A.test": "10.0.0.1", "a.test": "10.0.0.2"}})",
       "names the same host as another entry"},
      {R"({"resolve": ["a"]})",
       "resolve: must be an object"},
      {R"({"secrets": [{"header": "Authorization", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: missing \"host\""},
      {R"({"secrets": [{"host": "api.github.com", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: missing \"header\""},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization"}]})",
       "secrets[0]: missing \"value_from_env\""},
      {R"({"secrets": [{"host": "", "header": "Authorization", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: \"host\" must be a non-empty string"},
      {R"({"secrets": ["api.github.com"]})",
       "secrets[0]: must be an object"},
      {R"({"secrets": [{"host": "*.github.com", "header": "Authorization", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: host \"*.github.com\" is a wildcard"},
      {R"({"secrets": [{"host": "140.82.112.5", "header": "Authorization", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: host \"140.82.112.5\" is an IP address"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Bad Header", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: header \"Bad Header\" is not a valid HTTP"},
      {R"({"secrets": [{"host": "api.github.com", "header": "X-A\r\nX-B", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: header \"X-A\\r\\nX-B\" is not a valid"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Content-Length", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[0]: header \"Content-Length\" frames"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "NOT_SET"}]})",
       "secrets[0]: environment variable NOT_SET is unset or empty"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "EMPTY"}]})",
       "secrets[0]: environment variable EMPTY is unset or empty"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "WITH_CR"}]})",
       "secrets[0]: the value of environment variable WITH_CR contains CR, LF or NUL"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "WITH_LF"}]})",
       "variable WITH_LF contains CR, LF or NUL"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "WITH_NUL"}]})",
       "variable WITH_NUL contains CR, LF or NUL"},
      {R"({"secrets": [{"host": "api.github.com", "header": "Authorization", "value_from_env": "NOT-A-NAME"}]})",
       "value_from_env \"NOT-A-NAME\" is not an environment"},
      {R"({"secrets": [{"host": "a.test", "header": "Authorization", "value_from_env": "GITHUB_TOKEN", "format": "Bearer"}]})",
       "secrets[0]: format \"Bearer\" must contain \"{}\" exactly once"},
      {R"({"secrets": [{"host": "a.test", "header": "Authorization", "value_from_env": "GITHUB_TOKEN", "format": "{}{}"}]})",
       "format \"{}{}\" must contain"},
      {R"({"secrets": [{"host": "a.test", "header": "Authorization", "value_from_env": "GITHUB_TOKEN", "format": "{}\r\nX: y"}]})",
       "secrets[0]: format contains CR, LF or NUL"},
      {R"({"secrets": [{"host": "a.test", "header": "Authorization", "value_from_env": "GITHUB_TOKEN", "scope": 1}]})",
       "secrets[0]: unknown key \"scope\""},
      {R"({"secrets": [{"host": "a.test", "header": "Authorization", "value_from_env": "GITHUB_TOKEN"},
                    {"host": "A.test.", "header": "X-Key", "value_from_env": "GITHUB_TOKEN"}]})",
       "secrets[1]: a second secret for a.test"},
      {R"({"conversations": {"c1": {"conversations": {}}}})",
       "conversations[\"c1\"]: unknown key \"conversations\""},
      {R"({"conversations": {"c1": {"allow": ["*."]}}})",
       "conversations[\"c1\"].allow[0] \"*.\": nothing after \"*.\""},
      {R"({"conversations": {"c1": "pypi.org"}})",
       "conversations[\"c1\"]: must be an object"},
      {R"({"conversations": []})",
       "conversations: must be an object"},
      {R"([])",
       "policy /etc/p.json: the policy must be a JSON object"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    const std::string message = error_of(json::parse(text));
    CHECK_THAT(message, Catch::Contains(expected) && Catch::StartsWith("policy /etc/p.json: "));
    CHECK_THAT(message, !Catch::Contains("ghp_secretvalue") && !Catch::Contains("X-Injected"));
  }
}

TEST_CASE("lists, resolve and conversations are limited in size", "[policy]") {
  CHECK_NOTHROW(PolicyFile::parse({{"allow", json(std::vector<std::string>(4096, "a.test"))}}, kSource, test_env));
  CHECK_THAT(error_of({{"allow", json(std::vector<std::string>(4097, "a.test"))}}),
             Catch::Contains("allow: has 4097 entries; at most 4096"));
  CHECK_THAT(error_of({{"deny", json(std::vector<std::string>(4097, "a.test"))}}), Catch::Contains("deny: has 4097"));
  json conversations = json::object();
  for (int i = 0; i < 257; ++i) conversations["c" + std::to_string(i)] = json::object();
  CHECK_THAT(error_of({{"conversations", conversations}}), Catch::Contains("conversations: has 257 entries; at most 256"));
  conversations.erase("c0");
  CHECK_NOTHROW(PolicyFile::parse({{"conversations", conversations}}, kSource, test_env));
}

TEST_CASE("names match exactly or by wildcard suffix, never the bare suffix", "[policy]") {
  const auto p = policy({{"allow", {"pypi.org", "*.pythonhosted.org", "Registry.NPMjs.org."}}});
  CHECK(allowed(*p, "pypi.org", 443));
  CHECK(allowed(*p, "PyPI.org.", 443));
  CHECK_FALSE(allowed(*p, "www.pypi.org", 443));  // an exact entry covers no subdomain
  CHECK_FALSE(allowed(*p, "evilpypi.org", 443));
  CHECK_FALSE(allowed(*p, "pypi.org.evil.test", 443));
  CHECK(allowed(*p, "files.pythonhosted.org", 443));
  CHECK(allowed(*p, "a.b.pythonhosted.org", 80));
  CHECK_FALSE(allowed(*p, "pythonhosted.org", 443));
  CHECK_FALSE(allowed(*p, "evilpythonhosted.org", 443));
  CHECK(allowed(*p, "registry.npmjs.org", 443));

  const auto decision = p->check("files.pythonhosted.org", 443);
  CHECK(decision.rule == "*.pythonhosted.org");
  const auto missing = p->check("evil.test", 443);
  CHECK_FALSE(missing.allowed);
  CHECK(missing.rule.empty());
  CHECK(missing.reason == "evil.test:443 is not in the network allowlist");
  CHECK(p->check("evil test", 443).reason == "\"evil test\" is not a valid host name");
}

TEST_CASE("an entry without a port allows 80 and 443; a port allows only that port", "[policy]") {
  const auto p = policy({{"allow", {"pypi.org", "registry.npmjs.org:443", "git.test:8080", "git.test:9090"}}});
  CHECK(allowed(*p, "pypi.org", 80));
  CHECK(allowed(*p, "pypi.org", 443));
  const auto other = p->check("pypi.org", 8080);
  CHECK_FALSE(other.allowed);
  CHECK(other.rule == "pypi.org");
  CHECK(other.reason == "pypi.org:8080 is allowed only on ports 80 and 443 (rule 'pypi.org')");
  CHECK(allowed(*p, "registry.npmjs.org", 443));
  CHECK(p->check("registry.npmjs.org", 80).reason ==
        "registry.npmjs.org:80 is allowed only on port 443 (rule 'registry.npmjs.org:443')");
  CHECK(allowed(*p, "git.test", 8080));
  CHECK(allowed(*p, "git.test", 9090));  // a later entry for the same host still counts
  CHECK_FALSE(allowed(*p, "git.test", 443));
}

TEST_CASE("deny wins over allow; a deny without port covers every port", "[policy]") {
  const auto p = policy({{"allow", {"*.example.org", "169.254.169.254", "api.test:8443", "api.test"}},
                         {"deny", {"internal.example.org", "169.254.169.254", "api.test:8443", "*.corp.example.org"}}});
  CHECK(allowed(*p, "www.example.org", 443));
  for (std::uint16_t port : {80, 443, 22}) {
    const auto d = p->check("internal.example.org", port);
    CHECK_FALSE(d.allowed);
    CHECK(d.rule == "internal.example.org");
  }
  CHECK_FALSE(allowed(*p, "a.corp.example.org", 443));
  const auto metadata = p->check("169.254.169.254", 80);
  CHECK_FALSE(metadata.allowed);
  CHECK(metadata.reason == "169.254.169.254:80 is denied by rule '169.254.169.254'");
  CHECK_FALSE(allowed(*p, "api.test", 8443));  // the deny names this port
  CHECK(allowed(*p, "api.test", 443));          // and only this port
}

TEST_CASE("an IP literal is denied unless an allow entry names that address", "[policy]") {
  const auto p = policy({{"allow", {"10.1.2.3:8080", "192.0.2.7", "[2001:DB8::1]:443", "pypi.org"}}});
  CHECK(allowed(*p, "10.1.2.3", 8080));
  CHECK_FALSE(allowed(*p, "10.1.2.3", 80));
  CHECK(allowed(*p, "192.0.2.7", 443));
  const auto other = p->check("10.1.1.1", 80);
  CHECK_FALSE(other.allowed);
  CHECK(other.reason == "IP address 10.1.1.1:80 is not in the allowlist (only listed addresses may be reached)");

  // IPv6 literals, bracketed or not, in any spelling of the same address.
  CHECK(allowed(*p, "[2001:db8::1]", 443));
  CHECK(allowed(*p, "2001:0db8:0:0::1", 443));
  CHECK_FALSE(allowed(*p, "[2001:db8::2]", 443));
  CHECK(p->check("[::1]", 80).reason == "IP address [::1]:80 is not in the allowlist (only listed addresses may be reached)");
  // The mapped form of a listed IPv4 address is that address.
  CHECK(allowed(*p, "[::ffff:192.0.2.7]", 443));
}

TEST_CASE("IPv4 forms that curl and browsers accept are addresses, and denied", "[policy]") {
  const auto p = policy({{"allow", {"127.0.0.1"}}});
  CHECK(allowed(*p, "127.0.0.1", 80));
  for (const char* odd : {"127.1", "0x7f.1", "0X7F.0.0.1", "0177.0.0.1", "2130706433", "127.000.000.001", "0x7f000001",
                          "1.2.3.4.5", "foo.0x"}) {
    INFO(odd);
    CHECK(Policy::is_ip_literal(odd));
    CHECK_FALSE(allowed(*p, odd, 80));
  }
  CHECK(allowed(*p, "127.0.0.1.", 80));  // the trailing dot only
  CHECK_THAT(p->check("0x7f.1", 80).reason, Catch::Contains("is not in standard form"));
  CHECK_FALSE(Policy::is_ip_literal("1e100.net"));
  CHECK_FALSE(Policy::is_ip_literal("deadbeef"));
  CHECK_FALSE(Policy::is_ip_literal("123.example.org"));
  CHECK(Policy::is_ip_literal("[::1]"));
  CHECK(Policy::is_ip_literal("fd00::1"));
  CHECK_FALSE(Policy::is_ip_literal("[1.2.3.4]"));
}

TEST_CASE("resolved addresses are checked against address and CIDR denies", "[policy]") {
  const auto p = policy({{"allow", {"files.example.org", "*.example.org"}},
                         {"deny", {"169.254.0.0/16", "10.1.2.3/8", "fd00::/8", "192.0.2.1", "files.example.org:22",
                                   "[2001:db8::/32]:25"}}});
  const auto metadata = p->check_address("169.254.169.254", "files.example.org", 443);
  CHECK_FALSE(metadata.allowed);
  CHECK(metadata.rule == "169.254.0.0/16");
  CHECK(metadata.reason == "files.example.org resolved to 169.254.169.254, which is denied by rule '169.254.0.0/16'");
  const auto mapped = p->check_address("::ffff:169.254.1.1", "files.example.org", 443);
  CHECK_FALSE(mapped.allowed);
  CHECK(mapped.rule == "169.254.0.0/16");
  CHECK_FALSE(p->check_address("::FFFF:10.200.0.1", "a.example.org", 443).allowed);  // host bits of 10.1.2.3/8 dropped
  CHECK_FALSE(p->check_address("10.0.0.1", "a.example.org", 443).allowed);
  CHECK(p->check_address("11.0.0.1", "a.example.org", 443).allowed);
  CHECK_FALSE(p->check_address("fd12:3456::1", "a.example.org", 443).allowed);
  CHECK(p->check_address("fe80::1", "a.example.org", 443).allowed);
  CHECK_FALSE(p->check_address("192.0.2.1", "a.example.org", 443).allowed);
  CHECK(p->check_address("192.0.2.2", "a.example.org", 443).allowed);
  CHECK_FALSE(p->check_address("2001:db8::5", "a.example.org", 25).allowed);
  CHECK(p->check_address("2001:db8::5", "a.example.org", 443).allowed);  // that deny names port 25
  CHECK_FALSE(p->check_address("not-an-address", "a.example.org", 443).allowed);
  CHECK_FALSE(p->check_address("1.2.3", "a.example.org", 443).allowed);
  // A name entry in deny is not an address entry: check() applies it, check_address() does not.
  CHECK(p->check_address("203.0.113.9", "files.example.org", 22).allowed);
  CHECK_FALSE(p->check("files.example.org", 22).allowed);
  // An IP literal target is also checked against CIDR denies by check().
  CHECK(p->check("169.254.169.254", 80).rule == "169.254.0.0/16");

  const auto everything = policy({{"deny", {"::/0"}}});
  CHECK_FALSE(everything->check_address("8.8.8.8", "dns.test", 443).allowed);
  CHECK_FALSE(everything->check_address("2001:db8::1", "dns.test", 443).allowed);
}

TEST_CASE("a conversation adds to the top level and cannot remove a deny", "[policy]") {
  const json document = {
      {"allow", {"pypi.org"}},
      {"deny", {"internal.test"}},
      {"resolve", {{"git.internal.test", "127.0.0.1"}, {"cache.test", "10.0.0.5"}}},
      {"secrets", {secret("api.github.com", "Authorization", "GITHUB_TOKEN")}},
      {"conversations",
       {{"conv-1",
         {{"allow", {"internal.test", "crates.io"}},
          {"deny", {"pypi.org:80"}},
          {"resolve", {{"git.internal.test", "10.9.8.7"}}},
          {"secrets", {secret("crates.io", "X-Token", "GITHUB_TOKEN")}}}},
        {"id with spaces \"and quotes\"", {{"allow", {"example.com"}}}}}}};
  const auto file = PolicyFile::parse(document, kSource, test_env);
  const auto top = file.for_conversation("other");
  const auto conv = file.for_conversation("conv-1");
  CHECK(top == file.for_conversation(""));
  CHECK_FALSE(allowed(*top, "crates.io", 443));
  CHECK(allowed(*conv, "crates.io", 443));
  CHECK(allowed(*conv, "pypi.org", 443));
  CHECK_FALSE(allowed(*conv, "pypi.org", 80));       // its own deny is added
  CHECK_FALSE(allowed(*conv, "internal.test", 443));  // the top level's deny still wins
  CHECK(allowed(*top, "pypi.org", 80));
  CHECK(conv->pinned("git.internal.test") == "10.9.8.7");
  CHECK(top->pinned("git.internal.test") == "127.0.0.1");
  CHECK(conv->pinned("Cache.Test.") == "10.0.0.5");
  CHECK_FALSE(conv->pinned("other.test"));
  CHECK(conv->secret_for("api.github.com"));
  CHECK(conv->secret_for("crates.io"));
  CHECK_FALSE(top->secret_for("crates.io"));
  CHECK(allowed(*file.for_conversation("id with spaces \"and quotes\""), "example.com", 443));
}

TEST_CASE("secrets: read through getenv, matched by exact host, never described", "[policy]") {
  json with_format = secret("api.github.com", "Authorization", "GITHUB_TOKEN");
  with_format["format"] = "Bearer {}";
  const auto p = policy({{"secrets", {with_format, secret("Uploads.Example.org.", "X-Api-Key", "GITHUB_TOKEN")}},
                         {"resolve", {{"git.internal.test", "::FFFF:127.0.0.1"}}}});
  const auto* github = p->secret_for("API.github.com.");
  REQUIRE(github);
  CHECK(github->value == "ghp_secretvalue");
  CHECK(github->header_value() == "Bearer ghp_secretvalue");
  CHECK(github->placeholder() == "agentbox-secret:GITHUB_TOKEN");
  const auto* uploads = p->secret_for("uploads.example.org");
  REQUIRE(uploads);
  CHECK(uploads->header_value() == "ghp_secretvalue");  // the default format is "{}"
  CHECK_FALSE(p->secret_for("github.com"));
  CHECK_FALSE(p->secret_for("x.api.github.com"));
  CHECK_FALSE(p->secret_for("evilapi.github.com"));

  const json described = p->describe();
  CHECK(described["secrets"][0] ==
        json({{"host", "api.github.com"}, {"header", "Authorization"}, {"value_from_env", "GITHUB_TOKEN"}}));
  CHECK(described["resolve"] == json({{"git.internal.test", "127.0.0.1"}}));
  CHECK(described["allow"] == json::array());
  CHECK_THAT(described.dump(), !Catch::Contains("ghp_secretvalue"));
}

TEST_CASE("the server's environment is the default for secrets", "[policy]") {
  REQUIRE(setenv("AGENTBOX_POLICY_TEST_TOKEN", "from-env", 1) == 0);
  const json document = {{"secrets", {secret("api.test", "X-Key", "AGENTBOX_POLICY_TEST_TOKEN")}}};
  const auto file = PolicyFile::parse(document, kSource);
  CHECK(file.for_conversation("")->secret_for("api.test")->value == "from-env");
  REQUIRE(unsetenv("AGENTBOX_POLICY_TEST_TOKEN") == 0);
  CHECK_THROWS_WITH(PolicyFile::parse(document, kSource),
                    Catch::Contains("environment variable AGENTBOX_POLICY_TEST_TOKEN is unset or empty"));
}

TEST_CASE("describe lists the entries as written", "[policy]") {
  const auto p = policy({{"allow", {"PyPI.org", "*.pythonhosted.org"}}, {"deny", {"10.0.0.0/8", "fd00::/8"}}});
  CHECK(p->describe() == json({{"allow", {"PyPI.org", "*.pythonhosted.org"}},
                                {"deny", {"10.0.0.0/8", "fd00::/8"}},
                                {"resolve", json::object()},
                                {"secrets", json::array()}}));
}

TEST_CASE("normalise_host", "[policy]") {
  CHECK(Policy::normalise_host("PyPI.Org.") == "pypi.org");
  CHECK(Policy::normalise_host("[2001:DB8::1]") == "2001:db8::1");
  CHECK(Policy::normalise_host("::1") == "::1");
  CHECK(Policy::normalise_host("under_score.test") == "under_score.test");
  CHECK(Policy::normalise_host("xn--bcher-kva.example") == "xn--bcher-kva.example");
  for (const std::string& bad : std::vector<std::string>{"", ".", "a..b", ".a", "a.b..", "a b", "a/b", "user@host", "a%2e", "fe80::1%eth0",
                                "[fe80::1%eth0]", "a\tb", std::string("a\0b", 3), "host:80", "[1.2.3.4]", "[::1]:80",
                                "bücher.example", "a\r\nb", std::string(64, 'a') + ".test"}) {
    INFO(bad);
    CHECK(Policy::normalise_host(bad).empty());
  }
  CHECK(Policy::normalise_host(std::string(63, 'a') + ".test") == std::string(63, 'a') + ".test");
  std::string longest;
  while (longest.size() < 253) longest += longest.size() + 2 <= 253 ? "a." : "a";
  CHECK(Policy::normalise_host(longest) == longest);
  CHECK(Policy::normalise_host(longest + "a").empty());
}

TEST_CASE("load reads a file, and refuses a missing, oversized or malformed one", "[policy]") {
  const TempDir dir;
  const std::string good = dir.write("policy.json", R"({"allow": ["pypi.org"], "deny": ["10.0.0.0/8"]})");
  const auto file = PolicyFile::load(good);
  CHECK(allowed(*file.for_conversation("x"), "pypi.org", 443));

  const std::string missing = (dir.path / "missing.json").string();
  CHECK_THROWS_WITH(PolicyFile::load(missing),
                    Catch::StartsWith("policy " + missing + ": ") && Catch::Contains("No such file"));

  std::string padded = R"({"allow": ["pypi.org"]})";
  padded.resize((1 << 20) + 1, ' ');
  CHECK_THROWS_WITH(PolicyFile::load(dir.write("big.json", padded)), Catch::Contains("larger than 1 MiB"));
  padded.resize(1 << 20);  // exactly the limit is accepted
  CHECK_NOTHROW(PolicyFile::load(dir.write("big.json", padded)));

  const std::string broken = dir.write("broken.json", R"({"allow": ["pypi.org",]})");
  CHECK_THROWS_WITH(PolicyFile::load(broken),
                    Catch::StartsWith("policy " + broken + ": not valid JSON: ") && Catch::Contains("parse error"));
  const std::string bad_entry = dir.write("bad.json", R"({"allow": ["*."]})");
  CHECK_THROWS_WITH(PolicyFile::load(bad_entry), "policy " + bad_entry + ": allow[0] \"*.\": nothing after \"*.\"");
  CHECK_THROWS_WITH(PolicyFile::load(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("secret_variables names every secret's variable once, conversations included", "[policy]") {
  json top = secret("api.github.com", "Authorization", "GITHUB_TOKEN");
  const auto file = PolicyFile::parse(
      {{"secrets", {top}},
       {"conversations", {{"c1", {{"secrets", {secret("x.example.org", "X-Key", "GITHUB_TOKEN")}}}}}}},
      kSource, [](const std::string& name) -> std::optional<std::string> {
        if (name == "GITHUB_TOKEN") return "v";
        return std::nullopt;
      });
  CHECK(file.secret_variables() == std::vector<std::string>{"GITHUB_TOKEN"});
  CHECK(PolicyFile::parse(json::object(), kSource, test_env).secret_variables().empty());
}
