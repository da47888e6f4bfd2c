#include "network/policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace agentbox::network {

namespace {

using json = nlohmann::json;
using Getenv = std::function<std::optional<std::string>(const std::string&)>;

constexpr std::size_t kMaxEntries = 4096;        // per list, and per `resolve` object
constexpr std::size_t kMaxConversations = 256;
constexpr std::size_t kMaxFileBytes = 1 << 20;  // 1 MiB: a policy is a short hand-written file
constexpr std::size_t kMaxNameLength = 253;     // RFC 1035, in text form without the trailing dot
constexpr std::size_t kMaxLabelLength = 63;

// JSON-quoted, so control characters and broken UTF-8 in a file or a host
// name cannot garble a message or a reason.
std::string quote(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

bool has_header_breaker(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

// ---- Addresses -------------------------------------------------------------

// An address as 16 bytes: IPv4 is held as its IPv4-mapped IPv6 form
// (::ffff:a.b.c.d), so "10.0.0.0/8" also covers a resolver's "::ffff:10.1.2.3"
// and "::/0" covers every address.
using Bytes = std::array<unsigned char, 16>;

bool is_mapped(const Bytes& b) {
  return std::all_of(b.begin(), b.begin() + 10, [](unsigned char c) { return c == 0; }) && b[10] == 0xff &&
         b[11] == 0xff;
}

// Strict: only what inet_pton accepts, i.e. IPv4 as four decimal numbers
// without leading zeros, or IPv6 (no zone, no brackets).
std::optional<Bytes> parse_address(std::string_view text) {
  const std::string s(text);  // inet_pton wants a terminated string
  Bytes b{};
  if (inet_pton(AF_INET, s.c_str(), b.data() + 12) == 1) {
    b[10] = b[11] = 0xff;
    return b;
  }
  if (inet_pton(AF_INET6, s.c_str(), b.data()) == 1) return b;
  return std::nullopt;
}

// The canonical text: inet_ntop's, with IPv4-mapped IPv6 written as IPv4.
std::string address_text(const Bytes& b) {
  char text[INET6_ADDRSTRLEN] = {};
  if (is_mapped(b))
    inet_ntop(AF_INET, b.data() + 12, text, sizeof text);
  else
    inet_ntop(AF_INET6, b.data(), text, sizeof text);
  return text;
}

void mask(Bytes& b, int bits) {
  for (int i = 0; i < 16; ++i) {
    const int keep = std::clamp(bits - 8 * i, 0, 8);
    b[i] &= static_cast<unsigned char>(0xff00 >> keep);
  }
}

// Whether `address` is the address of an address rule, or inside its CIDR
// range. A rule's prefix counts in the family of its canonical text.
bool address_matches(const Rule& rule, const Bytes& address) {
  const auto network = parse_address(rule.host);
  if (!network) return false;
  const int bits = rule.prefix < 0 ? 128 : is_mapped(*network) ? 96 + rule.prefix : rule.prefix;
  Bytes masked = address;
  mask(masked, bits);
  return masked == *network;
}

// ---- Host names --------------------------------------------------------------

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

// Labels of 1 to 63 name characters joined by single dots. Non-ASCII is not
// a name character: clients send internationalised names as punycode (xn--).
bool is_valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  std::size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (!is_name_char(c) || ++label > kMaxLabelLength) {
      return false;
    }
  }
  return label > 0;
}

bool all_of_chars(std::string_view text, std::string_view set) {
  return text.find_first_not_of(set) == std::string_view::npos;
}

// WHATWG URL's "ends in a number": a host whose last label is all digits, or
// "0x" and hex digits, is an IPv4 address to browsers and curl, which also
// accept "1.2.3", "0x7f.1", "0177.0.0.1" and "2130706433" (all 127.0.0.1
// or near it). Such a host is an IP literal here too, so it is never taken
// for a name; only the standard dotted quad can match a rule. No top-level
// domain is numeric, so no real name is caught.
bool ends_in_number(std::string_view name) {
  const std::string_view last = name.substr(name.rfind('.') + 1);
  if (!last.empty() && all_of_chars(last, "0123456789")) return true;
  return last.substr(0, 2) == "0x" && all_of_chars(last.substr(2), "0123456789abcdef");
}

// On a normalised host: IPv6 (normalise_host only lets a ':' through in a
// valid IPv6 address) or anything a client would read as IPv4.
bool is_literal(std::string_view name) { return contains(name, ":") || ends_in_number(name); }

std::string endpoint(std::string_view name, std::uint16_t port) {
  const std::string host = contains(name, ":") ? "[" + std::string(name) + "]" : std::string(name);
  return host + ":" + std::to_string(port);
}

bool name_matches(const Rule& rule, std::string_view name) {
  if (!rule.wildcard) return name == rule.host;
  // "*.pypi.org" covers "files.pypi.org", not "pypi.org" nor "evilpypi.org".
  return name.size() > rule.host.size() + 1 && name.ends_with(rule.host) &&
         name[name.size() - rule.host.size() - 1] == '.';
}

// Whether a rule names this target, ports aside: address rules match IP
// literals in standard form, name rules match names.
bool covers(const Rule& rule, std::string_view name, const std::optional<Bytes>& address) {
  if (rule.is_address) return address && address_matches(rule, *address);
  return !is_literal(name) && name_matches(rule, name);
}

bool deny_port_matches(const Rule& rule, std::uint16_t port) { return !rule.port || *rule.port == port; }
bool allow_port_matches(const Rule& rule, std::uint16_t port) {
  return rule.port ? *rule.port == port : port == 80 || port == 443;
}

std::string ports_allowed(const Rule& rule) {
  return rule.port ? "port " + std::to_string(*rule.port) : "ports 80 and 443";
}

// ---- Parsing -----------------------------------------------------------------

// Where an entry is, for errors: `policy FILE: conversations["c"].allow[2] "x": what is wrong`.
struct Place {
  const std::string& source;
  std::string path;  // empty for the top-level object itself
  [[noreturn]] void fail(const std::string& problem) const {
    throw PolicyError("policy " + source + ": " + (path.empty() ? "" : path + ": ") + problem);
  }
  Place at(const std::string& more) const { return {source, path + more}; }
};

const char* const kNotStandardAddress =
    "not an IP address in standard form (IPv4 as a.b.c.d in decimal without leading zeros, or IPv6)";

std::uint16_t parse_port(std::string_view text, const Place& place) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || text.size() > 5 || ec != std::errc() || end != text.data() + text.size() || value == 0 ||
      value > 65535)
    place.fail("port " + quote(text) + " is not a number from 1 to 65535");
  return static_cast<std::uint16_t>(value);
}

// "host", "host:port", "[v6]" and "[v6]:port"; an IPv6 address with more
// than one colon and no brackets has no port ("::1:80" is an address).
std::pair<std::string_view, std::optional<std::string_view>> split_port(std::string_view text, const Place& place) {
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) place.fail("\"[\" without \"]\"");
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return {text, std::nullopt};
    if (rest.front() != ':') place.fail("unexpected " + quote(rest) + " after \"]\"");
    return {text.substr(0, close + 1), rest.substr(1)};
  }
  if (std::count(text.begin(), text.end(), ':') != 1) return {text, std::nullopt};
  const std::size_t colon = text.find(':');
  return {text.substr(0, colon), text.substr(colon + 1)};
}

// "10.0.0.0/8", "fd00::/8". Host bits are masked off: "10.1.2.3/8" denies
// 10.0.0.0/8, which is more, never less, than was written.
void parse_cidr(std::string_view host, Rule& rule, const Place& place) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::size_t slash = host.find('/');
  std::string address(host.substr(0, slash));
  std::transform(address.begin(), address.end(), address.begin(), [](unsigned char c) { return std::tolower(c); });
  auto bytes = parse_address(address);
  if (!bytes) place.fail(kNotStandardAddress);
  const bool v4 = !contains(address, ":");
  const int most = v4 ? 32 : 128;
  const std::string_view bits_text = host.substr(slash + 1);
  int bits = -1;
  const auto [end, ec] = std::from_chars(bits_text.data(), bits_text.data() + bits_text.size(), bits);
  if (bits_text.empty() || ec != std::errc() || end != bits_text.data() + bits_text.size() || bits < 0 ||
      bits > most)
    place.fail("prefix length " + quote(bits_text) + " is not a number from 0 to " + std::to_string(most));
  const int bits16 = v4 ? 96 + bits : bits;
  mask(*bytes, bits16);
  rule.is_address = true;
  rule.host = address_text(*bytes);
  rule.prefix = is_mapped(*bytes) ? bits16 - 96 : bits16;
}

Rule parse_rule(const std::string& text, bool deny, const Place& place) {
  if (text.empty()) place.fail("an entry may not be empty");
  Rule rule;
  rule.text = text;
  const auto [host, port] = split_port(text, place);
  if (port) rule.port = parse_port(*port, place);
  if (contains(host, "/")) {
    if (!deny) place.fail("a CIDR range may only be denied; an allow entry names a host or one address");
    parse_cidr(host, rule, place);
    return rule;
  }
  std::string_view name = host;
  if (contains(host, "*")) {
    if (!host.starts_with("*.") || contains(host.substr(2), "*"))
      place.fail("a wildcard may only be a leading \"*.\" (as in \"*.example.org\")");
    name = host.substr(2);
    if (name.empty()) place.fail("nothing after \"*.\"");
    rule.wildcard = true;
  }
  rule.host = Policy::normalise_host(name);
  if (rule.host.empty()) place.fail("not a valid host name");
  if (is_literal(rule.host)) {
    if (rule.wildcard) place.fail("a wildcard covers names, not IP addresses");
    const auto bytes = parse_address(rule.host);
    // "127.000.000.001", "0x7f.1": refused rather than guessed at.
    if (!bytes) place.fail(kNotStandardAddress);
    rule.is_address = true;
    rule.host = address_text(*bytes);
  }
  return rule;
}

void check_array(const json& value, const Place& place) {
  if (!value.is_array()) place.fail("must be an array");
  if (value.size() > kMaxEntries)
    place.fail("has " + std::to_string(value.size()) + " entries; at most " + std::to_string(kMaxEntries) +
               " are allowed");
}

std::vector<Rule> parse_rules(const json& list, bool deny, const Place& place) {
  std::vector<Rule> rules;
  check_array(list, place);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Place entry = place.at("[" + std::to_string(i) + "]");
    if (!list[i].is_string()) entry.fail("must be a string");
    const std::string& text = list[i].get_ref<const std::string&>();
    rules.push_back(parse_rule(text, deny, entry.at(" " + quote(text))));
  }
  return rules;
}

void check_keys(const json& object, std::initializer_list<std::string_view> keys, const std::string& what,
                const Place& place) {
  for (const auto& [key, value] : object.items())
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      place.fail("unknown key " + quote(key) + " (" + what + ")");
}

bool is_token(std::string_view text) {  // RFC 9110 token: an HTTP field name
  constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  return !text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kSymbols.find(c) != std::string_view::npos;
  });
}

bool is_env_name(std::string_view text) {
  return !text.empty() && !std::isdigit(static_cast<unsigned char>(text.front())) &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

// Headers that would change how the proxy frames or routes the request
// (request smuggling), not credentials.
bool is_framing_header(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string, std::less<>> framing = {
      "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "proxy-connection"};
  return framing.count(name) > 0;
}

std::string string_field(const json& object, const char* key, const Place& place) {
  const auto it = object.find(key);
  if (it == object.end()) place.fail(std::string("missing \"") + key + "\"");
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    place.fail(std::string("\"") + key + "\" must be a non-empty string");
  return it->get<std::string>();
}

Secret parse_secret(const json& item, const Getenv& getenv, const Place& place) {
  if (!item.is_object()) place.fail("must be an object with host, header and value_from_env");
  check_keys(item, {"host", "header", "value_from_env", "format"}, "a secret has host, header, value_from_env, format",
             place);
  Secret secret;
  const std::string host = string_field(item, "host", place);
  if (contains(host, "*")) place.fail("host " + quote(host) + " is a wildcard; a secret goes to exactly one host");
  secret.host = Policy::normalise_host(host);
  if (secret.host.empty()) place.fail("host " + quote(host) + " is not a valid host name");
  if (is_literal(secret.host)) place.fail("host " + quote(host) + " is an IP address; a secret goes to a named host");
  secret.header = string_field(item, "header", place);
  if (!is_token(secret.header)) place.fail("header " + quote(secret.header) + " is not a valid HTTP header name");
  if (is_framing_header(secret.header))
    place.fail("header " + quote(secret.header) + " frames or routes the request; it cannot carry a secret");
  secret.env = string_field(item, "value_from_env", place);
  if (!is_env_name(secret.env))
    place.fail("value_from_env " + quote(secret.env) + " is not an environment variable name");
  secret.format = item.contains("format") ? string_field(item, "format", place) : "{}";
  if (has_header_breaker(secret.format)) place.fail("format contains CR, LF or NUL");
  const std::size_t first = secret.format.find("{}");
  if (first == std::string::npos || secret.format.find("{}", first + 2) != std::string::npos)
    place.fail("format " + quote(secret.format) + " must contain \"{}\" exactly once");
  const std::optional<std::string> value = getenv(secret.env);
  if (!value || value->empty()) place.fail("environment variable " + secret.env + " is unset or empty");
  // The value goes into a header line: CR or LF would start a header of the
  // value's choosing. The message never repeats the value.
  if (has_header_breaker(*value))
    place.fail("the value of environment variable " + secret.env + " contains CR, LF or NUL");
  secret.value = *value;
  return secret;
}

std::vector<Secret> parse_secrets(const json& list, const Getenv& getenv, const Place& place) {
  std::vector<Secret> secrets;
  check_array(list, place);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Place entry = place.at("[" + std::to_string(i) + "]");
    Secret secret = parse_secret(list[i], getenv, entry);
    for (const Secret& earlier : secrets)
      if (earlier.host == secret.host) entry.fail("a second secret for " + secret.host + " (one secret per host)");
    secrets.push_back(std::move(secret));
  }
  return secrets;
}

using Pins = std::map<std::string, std::string, std::less<>>;

Pins parse_resolve(const json& object, const Place& place) {
  if (!object.is_object()) place.fail("must be an object mapping names to IP addresses");
  if (object.size() > kMaxEntries)
    place.fail("has " + std::to_string(object.size()) + " names; at most " + std::to_string(kMaxEntries) +
               " are allowed");
  Pins pins;
  for (const auto& [name, value] : object.items()) {
    const Place entry = place.at("[" + quote(name) + "]");
    if (contains(name, "*")) entry.fail("a pinned name cannot be a wildcard");
    std::string host = Policy::normalise_host(name);
    if (host.empty()) entry.fail("not a valid host name");
    if (is_literal(host)) entry.fail("an IP address is not resolved; only names can be pinned");
    if (!value.is_string()) entry.fail("must be an IP address string");
    const auto address = parse_address(value.get_ref<const std::string&>());
    if (!address) entry.fail(quote(value.get_ref<const std::string&>()) + " is " + kNotStandardAddress);
    if (!pins.emplace(std::move(host), address_text(*address)).second)
      entry.fail("names the same host as another entry");
  }
  return pins;
}

// The four lists of a policy, as one object of the file holds them.
struct Sections {
  std::vector<Rule> allow;
  std::vector<Rule> deny;
  std::vector<Secret> secrets;
  Pins resolve;
};

Sections parse_sections(const json& object, const Getenv& getenv, const Place& place) {
  Sections s;
  if (const auto it = object.find("allow"); it != object.end()) s.allow = parse_rules(*it, false, place.at("allow"));
  if (const auto it = object.find("deny"); it != object.end()) s.deny = parse_rules(*it, true, place.at("deny"));
  if (const auto it = object.find("secrets"); it != object.end())
    s.secrets = parse_secrets(*it, getenv, place.at("secrets"));
  if (const auto it = object.find("resolve"); it != object.end()) s.resolve = parse_resolve(*it, place.at("resolve"));
  return s;
}

// A conversation's entry adds rules to the top level's; it cannot remove a
// deny (deny is checked first, so an added allow never overrides one). Its
// pins and its secrets replace the top level's for the same host.
Sections merge(const Sections& top, Sections added) {
  Sections out = top;
  out.allow.insert(out.allow.end(), added.allow.begin(), added.allow.end());
  out.deny.insert(out.deny.end(), added.deny.begin(), added.deny.end());
  for (auto& [host, address] : added.resolve) out.resolve[host] = std::move(address);
  for (Secret& secret : added.secrets) {
    std::erase_if(out.secrets, [&](const Secret& s) { return s.host == secret.host; });
    out.secrets.push_back(std::move(secret));
  }
  return out;
}

std::optional<std::string> server_environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value) return std::nullopt;
  return std::string(value);
}

}  // namespace

// ---- Policy ------------------------------------------------------------------

std::string Secret::header_value() const {
  const std::size_t at = format.find("{}");
  if (at == std::string::npos) return format.empty() ? value : format;  // a Secret not made by parse()
  return format.substr(0, at) + value + format.substr(at + 2);
}

std::string Policy::normalise_host(std::string_view host) {
  if (host.size() > kMaxNameLength + 2) return "";
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return c < 0x80 ? std::tolower(c) : c; });
  const bool bracketed = h.size() >= 2 && h.front() == '[' && h.back() == ']';
  if (bracketed) h = h.substr(1, h.size() - 2);
  if (bracketed || contains(h, ":")) {
    // Only IPv6 has a colon; a zone ("fe80::1%eth0") is refused with the '%'.
    in6_addr unused;
    return inet_pton(AF_INET6, h.c_str(), &unused) == 1 ? h : "";
  }
  if (!h.empty() && h.back() == '.') h.pop_back();
  return is_valid_name(h) ? h : "";
}

bool Policy::is_ip_literal(std::string_view host) {
  const std::string name = normalise_host(host);
  return !name.empty() && is_literal(name);
}

// Deny entries first, so no allow entry (nor a conversation's) can undo one.
// Then an IP literal must be listed as that exact address; then a name must
// match an allow entry by name and port.
Decision Policy::check(std::string_view host, std::uint16_t port) const {
  const std::string name = normalise_host(host);
  if (name.empty()) return {false, "", quote(host) + " is not a valid host name"};
  const std::string target = endpoint(name, port);
  const bool literal = is_literal(name);
  const std::optional<Bytes> address = literal ? parse_address(name) : std::nullopt;
  for (const Rule& rule : deny_)
    if (deny_port_matches(rule, port) && covers(rule, name, address))
      return {false, rule.text, target + " is denied by rule '" + rule.text + "'"};
  const Rule* wrong_port = nullptr;
  for (const Rule& rule : allow_) {
    if (!covers(rule, name, address)) continue;
    if (allow_port_matches(rule, port)) return {true, rule.text, target + " is allowed by rule '" + rule.text + "'"};
    if (!wrong_port) wrong_port = &rule;
  }
  if (wrong_port)
    return {false, wrong_port->text,
            target + " is allowed only on " + ports_allowed(*wrong_port) + " (rule '" + wrong_port->text + "')"};
  if (literal && !address)
    return {false, "",
            "IP address " + target + " is not in standard form and not in the allowlist (only listed addresses, " +
                "written as a.b.c.d or IPv6, may be reached)"};
  if (literal)
    return {false, "", "IP address " + target + " is not in the allowlist (only listed addresses may be reached)"};
  return {false, "", target + " is not in the network allowlist"};
}

Decision Policy::check_address(std::string_view address, std::string_view host, std::uint16_t port) const {
  const std::string name = normalise_host(host);
  const std::string who = name.empty() ? quote(host) : name;
  const std::string normalised = normalise_host(address);
  const std::optional<Bytes> bytes = parse_address(normalised);
  if (!bytes) return {false, "", who + " resolved to " + quote(address) + ", which is not an IP address"};
  const std::string text = address_text(*bytes);  // "::ffff:10.1.2.3" is checked, and shown, as 10.1.2.3
  for (const Rule& rule : deny_)
    if (rule.is_address && deny_port_matches(rule, port) && address_matches(rule, *bytes))
      return {false, rule.text, who + " resolved to " + text + ", which is denied by rule '" + rule.text + "'"};
  return {true, "", who + " resolved to " + text + ", which no deny rule names"};
}

std::optional<std::string> Policy::pinned(std::string_view host) const {
  const auto it = resolve_.find(normalise_host(host));
  if (it == resolve_.end()) return std::nullopt;
  return it->second;
}

const Secret* Policy::secret_for(std::string_view host) const {
  const std::string name = normalise_host(host);
  if (name.empty()) return nullptr;
  for (const Secret& secret : secrets_)
    if (secret.host == name) return &secret;
  return nullptr;
}

json Policy::describe() const {
  json out = {{"allow", json::array()}, {"deny", json::array()}, {"resolve", json::object()}, {"secrets", json::array()}};
  for (const Rule& rule : allow_) out["allow"].push_back(rule.text);
  for (const Rule& rule : deny_) out["deny"].push_back(rule.text);
  for (const auto& [host, address] : resolve_) out["resolve"][host] = address;
  for (const Secret& secret : secrets_)
    out["secrets"].push_back({{"host", secret.host}, {"header", secret.header}, {"value_from_env", secret.env}});
  return out;
}

// ---- PolicyFile ----------------------------------------------------------------

PolicyFile PolicyFile::parse(const json& document, const std::string& source_name, const Getenv& getenv) {
  const Getenv& lookup = getenv ? getenv : Getenv(server_environment);
  const Place top_place{source_name, ""};
  if (!document.is_object()) top_place.fail("the policy must be a JSON object");
  check_keys(document, {"allow", "deny", "secrets", "resolve", "conversations"},
             "a policy has allow, deny, secrets, resolve, conversations", top_place);
  const Sections top = parse_sections(document, lookup, top_place);
  const auto make = [](Sections s) {
    auto policy = std::make_shared<Policy>();
    policy->allow_ = std::move(s.allow);
    policy->deny_ = std::move(s.deny);
    policy->secrets_ = std::move(s.secrets);
    policy->resolve_ = std::move(s.resolve);
    return policy;
  };
  PolicyFile file;
  file.top_ = make(top);
  const auto conversations = document.find("conversations");
  if (conversations == document.end()) return file;
  const Place place = top_place.at("conversations");
  if (!conversations->is_object()) place.fail("must be an object mapping conversation ids to policies");
  if (conversations->size() > kMaxConversations)
    place.fail("has " + std::to_string(conversations->size()) + " entries; at most " +
               std::to_string(kMaxConversations) + " are allowed");
  for (const auto& [id, entry] : conversations->items()) {
    const Place at = place.at("[" + quote(id) + "]");
    if (!entry.is_object()) at.fail("must be an object");
    check_keys(entry, {"allow", "deny", "secrets", "resolve"}, "a conversation has allow, deny, secrets, resolve", at);
    file.conversations_[id] = make(merge(top, parse_sections(entry, lookup, at.at("."))));
  }
  return file;
}

PolicyFile PolicyFile::load(const std::string& path) {
  const Place place{path, ""};
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error) place.fail("cannot read it: " + error.message());
  if (!std::filesystem::is_regular_file(status)) place.fail("not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) place.fail(std::string("cannot open it: ") + std::strerror(errno));
  // Read one byte past the limit rather than trust the size: the file may grow.
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) place.fail("cannot read it");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) place.fail("larger than 1 MiB; a policy file is at most 1 MiB");
  json document;
  try {
    document = json::parse(text);
  } catch (const json::parse_error& e) {
    place.fail(std::string("not valid JSON: ") + e.what());
  }
  return parse(document, path);
}

std::shared_ptr<const Policy> PolicyFile::for_conversation(const std::string& conversation) const {
  const auto it = conversations_.find(conversation);
  return it == conversations_.end() ? top_ : it->second;
}

std::vector<std::string> PolicyFile::secret_variables() const {
  std::set<std::string> names;
  for (const auto& secret : top_->secrets()) names.insert(secret.env);
  for (const auto& [id, policy] : conversations_)
    for (const auto& secret : policy->secrets()) names.insert(secret.env);
  return {names.begin(), names.end()};
}

}  // namespace agentbox::network
