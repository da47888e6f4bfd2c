// `--network proxy` through the real manager and real boxes (docs/design.md
// section 10): inside the box the proxy variables point at 127.0.0.1:3128,
// which is the server's proxy (made in the box's namespace, net_namespace.h);
// an allowed host is reached, a denied one gets 403 and shows up in the
// box's denials, and there is no other way out: no route, no DNS, no UDP.
// HTTPS to a host with a secret is intercepted with the proxy's CA, which
// the box trusts through its environment, while the CA's key stays out.
#include "fixture.h"

#include "network/ca.h"
#include "network/policy.h"
#include "network/proxy.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace agentbox;
using namespace agentbox::sandbox;
using namespace agentbox::sandbox::test;
namespace fs = std::filesystem;

namespace {

// An origin on the host's loopback, plain HTTP or, given a certificate and
// its key, HTTPS: answers every GET with "origin saw <path> auth=<Authorization header>".
class Origin {
 public:
  explicit Origin(const std::vector<std::string>& tls = {}) {
    char tmpl[] = "/tmp/agentbox-origin-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(dir_ / "origin.py") << R"(import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("origin saw %s auth=%s" % (self.path, self.headers.get("Authorization"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 1:
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(sys.argv[1], sys.argv[2])
    s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
)";
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      if (tls.size() == 2) execlp("python3", "python3", (dir_ / "origin.py").c_str(), tls[0].c_str(), tls[1].c_str(), nullptr);
      else execlp("python3", "python3", (dir_ / "origin.py").c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    FILE* in = fdopen(out[0], "r");
    REQUIRE(in);
    int port = 0;
    if (std::fscanf(in, "%d", &port) != 1) FAIL("the python3 origin did not start (is python3 installed?)");
    std::fclose(in);
    port_ = port;
  }
  ~Origin() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  int port() const { return port_; }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A test CA and a certificate it signs for secret.test (the openssl
// command), which the server's side trusts through SSL_CERT_FILE, as a
// server given that variable would; and the proxy's own CA, which boxes trust.
struct Certificates {
  Certificates() {
    char tmpl[] = "/tmp/agentbox-certs-XXXXXX";
    dir = mkdtemp(tmpl);
    REQUIRE(std::system(("(cd " + dir.string() +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=testca"
                         " && openssl req -newkey rsa:2048 -nodes -keyout o.key -out o.csr -subj /CN=secret.test"
                         " && printf 'subjectAltName=DNS:secret.test\\n' > san"
                         " && openssl x509 -req -in o.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out o.pem -days 2"
                         " -extfile san) >/dev/null 2>&1")
                            .c_str()) == 0);
    REQUIRE(setenv("SSL_CERT_FILE", (dir / "ca.pem").c_str(), 1) == 0);
    authority = network::CertificateAuthority::open(dir / "network-ca");
  }
  ~Certificates() {
    unsetenv("SSL_CERT_FILE");
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::vector<std::string> origin() const { return {(dir / "o.pem").string(), (dir / "o.key").string()}; }
  fs::path dir;
  std::shared_ptr<network::CertificateAuthority> authority;
};

ManagerOptions proxy_options(int origin_port, ManagerOptions::Spare spare = ManagerOptions::Spare::Prepared,
                             std::shared_ptr<network::CertificateAuthority> ca = nullptr) {
  json policy = {
      {"allow", {"origin.test:" + std::to_string(origin_port), "secret.test:" + std::to_string(origin_port)}},
      {"deny", {"169.254.169.254"}},
      {"resolve", {{"origin.test", "127.0.0.1"}, {"secret.test", "127.0.0.1"}}},
      {"secrets", {{{"host", "secret.test"}, {"header", "Authorization"}, {"value_from_env", "TEST_TOKEN"},
                    {"format", "Bearer {}"}}}}};
  ManagerOptions o;
  o.spare = spare;
  o.proxy = std::make_shared<network::Proxy>(std::move(ca));
  o.network_policy = std::make_shared<const network::PolicyFile>(network::PolicyFile::parse(
      policy, "test policy", [](const std::string& name) -> std::optional<std::string> {
        if (name == "TEST_TOKEN") return "s3cr3t-value";
        return std::nullopt;
      }));
  return o;
}

std::string out(SandboxFixture& f, const std::string& command) { return f.exec(command)["stdout"]; }

}  // namespace

TEST_CASE("a box in proxy mode reaches allowed hosts through the proxy and nothing else") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  Origin origin;
  std::string port = std::to_string(origin.port());
  auto spare = GENERATE(ManagerOptions::Spare::None, ManagerOptions::Spare::Prepared, ManagerOptions::Spare::Warm);
  SandboxFixture f(proxy_options(origin.port(), spare));

  CHECK(out(f, "echo $HTTP_PROXY $https_proxy") == "http://127.0.0.1:3128 http://127.0.0.1:3128\n");
  CHECK(out(f, "echo $TEST_TOKEN") == "agentbox-secret:TEST_TOKEN\n");
  CHECK(out(f, "curl -sS http://origin.test:" + port + "/hello") == "origin saw /hello auth=None");

  auto before = std::chrono::system_clock::now() - std::chrono::seconds(1);
  json denied = f.exec("curl -sS -w ' %{http_code}' http://denied.test/");
  CHECK(denied["stdout"].get<std::string>().find("denied.test") != std::string::npos);
  CHECK(denied["stdout"].get<std::string>().find(" 403") != std::string::npos);
  auto denials = f.manager->network_denials("test", before);
  REQUIRE(denials.size() == 1);
  CHECK(denials[0].host == "denied.test");
  CHECK(denials[0].port == 80);
  CHECK(denials[0].reason.find("denied.test") != std::string::npos);

  // The secret goes to its host only, and the box only ever holds the placeholder.
  CHECK(out(f, "curl -sS http://secret.test:" + port + "/") == "origin saw / auth=Bearer s3cr3t-value");
  CHECK(out(f, "curl -sS -H \"Authorization: $TEST_TOKEN\" http://origin.test:" + port + "/") ==
        "origin saw / auth=agentbox-secret:TEST_TOKEN");

  // No other way out: the host's loopback is not the box's, no route, no DNS, no UDP.
  CHECK(f.exec("curl -sS --noproxy '*' -m 5 http://127.0.0.1:" + port + "/")["exit_code"] != 0);
  CHECK(f.exec("curl -sS --noproxy '*' -m 5 http://192.0.2.1/")["exit_code"] != 0);
  CHECK(f.exec("getent hosts origin.test")["exit_code"] != 0);
  CHECK(f.exec("echo x > /dev/udp/192.0.2.1/53")["exit_code"] != 0);
}

TEST_CASE("the proxy comes back with the box after an idle teardown and restore") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  Origin origin;
  std::string port = std::to_string(origin.port());
  SandboxFixture f(proxy_options(origin.port(), ManagerOptions::Spare::None));
  std::string url = "curl -sS http://origin.test:" + port + "/again";
  REQUIRE(out(f, url) == "origin saw /again auth=None");
  REQUIRE(f.manager->teardown("test"));
  CHECK(out(f, url) == "origin saw /again auth=None");
}

// The policy in force is kept with the conversation (docs/network.md, "The
// policy in force"): a fork runs under its source's `conversations` entry
// (its own name has none), and a server started again on the same state
// directory applies it again.
TEST_CASE("a fork runs under its source's proxy policy, and a restarted server applies it again") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  Origin origin;
  std::string port = std::to_string(origin.port());
  auto with_entry = [&] {
    ManagerOptions o = proxy_options(origin.port(), ManagerOptions::Spare::None);
    json policy = {{"allow", {"origin.test:" + port}},
                   {"resolve", {{"origin.test", "127.0.0.1"}, {"extra.test", "127.0.0.1"}}},
                   {"conversations", {{"source", {{"allow", {"extra.test:" + port}}}}}}};
    o.network_policy = std::make_shared<const network::PolicyFile>(network::PolicyFile::parse(policy, "test policy"));
    return o;
  };
  SandboxFixture f(with_entry());
  std::string extra = "curl -sS -w ' %{http_code}' http://extra.test:" + port + "/x";
  REQUIRE(f.exec(extra, {}, "source")["stdout"] == "origin saw /x auth=None 200");
  CHECK(f.exec(extra, {}, "other")["stdout"].get<std::string>().find(" 403") != std::string::npos);

  auto forked = f.manager->fork("source", "", "forked", 1);
  REQUIRE(forked.forks.size() == 1);
  CHECK(f.exec(extra, {}, "forked")["stdout"] == "origin saw /x auth=None 200");
  auto network = f.manager->network_policy("forked");
  REQUIRE(network);
  CHECK(network->describe()["allow"].dump().find("extra.test") != std::string::npos);

  ManagerOptions again = with_entry();
  again.state_dir = f.state_dir;
  again.agent_binary = f.manager->options().agent_binary;
  f.manager.reset();
  f.manager = std::make_unique<Manager>(again);
  CHECK(f.exec(extra, {}, "forked")["stdout"] == "origin saw /x auth=None 200");
  CHECK(f.exec(extra, {}, "other")["stdout"].get<std::string>().find(" 403") != std::string::npos);
}

// A background process's span is in process.output (the server shows the
// denials of that span, tools/process_tools.cpp); a destroyed box's
// denials go with it, a stopped one's stay.
TEST_CASE("a background process reports its span, and denials outlive a teardown but not a destroy") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  Origin origin;
  SandboxFixture f(proxy_options(origin.port(), ManagerOptions::Spare::None));
  auto before = std::chrono::system_clock::now() - std::chrono::seconds(1);
  json started = f.call("process.start", {{"command", "curl -sS http://denied.test/"}});
  std::string id = started["process_id"];
  f.call("process.wait", {{"process_id", id}, {"timeout_ms", 30000}});
  json output = f.call("process.output", {{"process_id", id}});
  REQUIRE(output.contains("started_unix_ms"));
  REQUIRE(output.contains("ended_unix_ms"));
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(output["started_unix_ms"].get<std::int64_t>() <= output["ended_unix_ms"].get<std::int64_t>());
  CHECK(output["ended_unix_ms"].get<std::int64_t>() <= now_ms);
  CHECK(now_ms - output["started_unix_ms"].get<std::int64_t>() < 60'000);
  REQUIRE(f.manager->network_denials("test", before).size() == 1);

  REQUIRE(f.manager->teardown("test"));
  CHECK(f.manager->network_denials("test", before).size() == 1);
  REQUIRE(f.manager->destroy("test", /*keep_snapshots=*/true));  // the sandbox id stays with the conversation
  CHECK(f.manager->network_denials("test", before).empty());
}

// What a host command prints.
static std::string output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

TEST_CASE("a box reaches an HTTPS host with a secret through the proxy's CA, and never holds the CA's key") {
  std::string why;
  if (!sandboxes_supported(why)) FAIL(why);
  Certificates certificates;
  Origin origin(certificates.origin());
  std::string port = std::to_string(origin.port());
  SandboxFixture f(proxy_options(origin.port(), ManagerOptions::Spare::None, certificates.authority));

  CHECK(out(f, "echo $SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $PIP_CERT $GIT_SSL_CAINFO $NODE_EXTRA_CA_CERTS") ==
        "/etc/agentbox-ca-bundle.pem /etc/agentbox-ca-bundle.pem /etc/agentbox-ca-bundle.pem /etc/agentbox-ca-bundle.pem "
        "/etc/agentbox-ca-bundle.pem /etc/agentbox-ca.pem\n");
  // No -k, no --cacert: the box's environment names the bundle.
  CHECK(out(f, "curl -sS https://secret.test:" + port + "/tls") == "origin saw /tls auth=Bearer s3cr3t-value");
  CHECK(out(f, "python3 -c \"import urllib.request; print(urllib.request.urlopen('https://secret.test:" + port +
                   "/py').read().decode())\"") == "origin saw /py auth=Bearer s3cr3t-value\n");
  // The bundle is the system's roots and the agentbox CA: other hosts verify as before.
  CHECK(out(f, "grep -c 'BEGIN CERTIFICATE' /etc/agentbox-ca.pem") == "1\n");
  CHECK(std::stoi(out(f, "grep -c 'BEGIN CERTIFICATE' /etc/agentbox-ca-bundle.pem")) > 1);
  CHECK(f.exec("echo x > /etc/agentbox-ca-bundle.pem")["exit_code"] != 0);  // read-only

  // The key's PEM body, found where it lives (so the search works), is
  // nowhere in the box (the host's OS directories, bound read-only, aside)
  // and nowhere in the state directory's sandbox trees.
  std::ifstream key_file(certificates.dir / "network-ca" / "ca.key");
  std::string line;
  std::getline(key_file, line);
  REQUIRE(line == "-----BEGIN PRIVATE KEY-----");
  std::getline(key_file, line);
  REQUIRE(line.size() > 40);
  std::string search = "grep -rlF -D skip -e '" + line + "' ";
  REQUIRE(std::system((search + certificates.dir.string() + " >/dev/null").c_str()) == 0);
  // In two halves: the command itself (kept by the agent under /run) must not hold the body.
  const std::size_t half = line.size() / 2;
  json found = f.exec("a='" + line.substr(0, half) + "'; b='" + line.substr(half) +
                          "'; grep -rlF -D skip -e \"$a$b\" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "
                          "--exclude-dir=opt 2>/dev/null; echo searched",
                      {{"timeout_ms", 120'000}});
  CHECK(found["stdout"] == "searched\n");
  CHECK(std::system((search + f.state_dir.string() + " >/dev/null").c_str()) != 0);

  // Nor in a snapshot: its archive is compressed, so its contents are
  // searched, with a marker the box wrote to show the search finds things.
  REQUIRE(f.exec("echo agentbox-marker-$((6*7)) > /workspace/marker; echo agentbox-marker-$((6*7)) > ~/marker")["exit_code"] == 0);
  auto taken = f.manager->snapshot("test", "with the CA in use");
  const std::string archive = (f.state_dir / taken.record.path).string();
  REQUIRE(std::filesystem::is_regular_file(archive));
  const std::string contents = "tar --zstd -xOf '" + archive + "' | grep -caF -e ";
  CHECK(output(contents + "agentbox-marker-42") == "2\n");
  CHECK(output(contents + "'" + line + "'") == "0\n");
}
