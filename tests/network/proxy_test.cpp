// The egress proxy (network/proxy.h) against real servers on the host's
// loopback: a python3 HTTP origin and an HTTPS one with a certificate from a
// test CA made by the openssl command, and real clients (curl, python3's
// socket and ssl). The proxy listens on a socket the test makes, as the
// sandbox side does inside a box. A missing curl, python3 or openssl fails
// the test: nothing here passes by not running.
#include "network/policy.h"
#include "network/proxy.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace agentbox::network;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// /          "host=H auth=A x=X" of the request's Host, Authorization, X-Token
// /headers   the path and every header as received
// /big?N     N MiB of a fixed pattern;  /redirect?URL  a 302 to URL
// /hang      answers after 30 s;        POST           the body's sha256
// /chunked   "hello chunked world" in three chunks
const char* kOrigin = R"(import hashlib, http.server, ssl, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, body, code=200, headers=()):
        self.send_response(code)
        for k, v in headers: self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/big"):
            n = int(self.path.split("?")[1]) << 20
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = bytes(range(256)) * 4096
            while n > 0:
                self.wfile.write(block[:min(n, len(block))])
                n -= len(block)
            return
        if self.path.startswith("/redirect"):
            return self.reply(b"", 302, [("Location", self.path.split("?", 1)[1])])
        if self.path.startswith("/hang"):
            time.sleep(30)
        if self.path.startswith("/headers"):
            return self.reply(("path=%s\n%s" % (self.path, self.headers)).encode())
        self.reply(("host=%s auth=%s x=%s" % (self.headers.get("Host"), self.headers.get("Authorization"),
                                              self.headers.get("X-Token"))).encode())
    def do_POST(self):
        n, h = int(self.headers["Content-Length"]), hashlib.sha256()
        while n > 0:
            d = self.rfile.read(min(n, 1 << 20))
            if not d: break
            h.update(d)
            n -= len(d)
        self.reply(h.hexdigest().encode())
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 1:
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(sys.argv[1], sys.argv[2])
    s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
)";

// A client speaking to the proxy by hand: client.py PROXY_PORT CA MODE ARGS.
//   tunnel REQUEST SNI   sends REQUEST; after a 200, a TLS handshake naming
//                        SNI ("-" for none), or when SNI is "raw:BYTES", BYTES
//   hold REQUEST...      sends each request on its own connection, prints
//                        "ready", then how each connection ended
//   flood N              opens N connections, prints how many were closed
const char* kClient = R"(import socket, ssl, sys, time
port, ca, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def connect(): return socket.create_connection(("127.0.0.1", port))
def handshake(s, sni):
    c = ssl.create_default_context(cafile=ca)
    if sni == "-": c.check_hostname = False
    return c.wrap_socket(s, server_hostname=None if sni == "-" else sni)
if mode == "tunnel":
    s = connect()
    s.sendall(sys.argv[4].encode())
    head = s.recv(4096).decode(errors="replace")
    print(head.split("\r\n")[0])
    if " 200 " not in head: sys.exit(0)
    if sys.argv[5].startswith("raw:"):
        s.sendall(sys.argv[5][4:].encode()); s.settimeout(10)
        print("got", repr(s.recv(100)))
    else:
        try: handshake(s, sys.argv[5]); print("handshake ok")
        except Exception as e: print("handshake failed", type(e).__name__)
elif mode == "hold":
    held = []
    for request in sys.argv[4:]:
        s = connect()
        s.sendall(request.encode())
        if request.startswith("CONNECT"):
            s.recv(4096)
            s = handshake(s, request.split()[1].split(":")[0])
        held.append(s)
    print("ready", flush=True)
    for s in held:
        s.settimeout(20)
        start = time.time()
        try:
            while s.recv(65536): pass
        except socket.timeout:
            print("not closed")
            continue
        except OSError: pass  # a TLS socket's end without close_notify
        print("closed after %.1f s" % (time.time() - start))
elif mode == "flood":
    held = [connect() for _ in range(int(sys.argv[4]))]
    time.sleep(1)
    closed = 0
    for s in held:
        s.setblocking(False)
        try: closed += s.recv(1) == b""
        except BlockingIOError: pass
    print("closed", closed)
)";

int run(const std::string& command) { return std::system(("(" + command + ") >/dev/null 2>&1").c_str()); }

std::string output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

// The hex digest of what `command` writes.
std::string sha256_of(const std::string& command) {
  std::string out = output(command + " | sha256sum | cut -d' ' -f1");
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The scratch directory and the origins, gone with the fixture even when
// its constructor fails; an origin also dies with the test binary
// (PR_SET_PDEATHSIG), so a crash leaves no server holding a caller's pipe.
struct Scratch {
  fs::path dir;
  std::vector<pid_t> servers;
  Scratch() {
    char tmpl[] = "/tmp/agentbox-proxy-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    dir = tmpl;
  }
  ~Scratch() {
    for (pid_t pid : servers) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

struct Fixture {
  Scratch scratch;
  fs::path& dir = scratch.dir;
  int http_port = 0, https_port = 0, proxy_port = 0;
  std::optional<Proxy> proxy{std::in_place};

  Fixture() {
    for (const char* tool : {"curl --version", "python3 --version", "openssl version", "sha256sum --version"})
      if (run(tool) != 0) FAIL(std::string("this test needs `") + tool + "` to work");
    std::ofstream(dir / "origin.py") << kOrigin;
    std::ofstream(dir / "client.py") << kClient;
    REQUIRE(run("cd " + dir.string() +
                " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=testca"
                " && openssl req -newkey rsa:2048 -nodes -keyout o.key -out o.csr -subj /CN=allowed.test"
                " && printf 'subjectAltName=DNS:allowed.test,DNS:other.test\\n' > san"
                " && openssl x509 -req -in o.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out o.pem -days 2 -extfile san") == 0);
    http_port = start({});
    https_port = start({(dir / "o.pem").string(), (dir / "o.key").string()});
  }

  int start(const std::vector<std::string>& args) {
    int out[2];
    REQUIRE(pipe(out) == 0);
    const std::string script = (dir / "origin.py").string(), log = (dir / "origin.log").string();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out[1], 1);
      int err = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (err >= 0) dup2(err, 2);
      if (args.empty()) execlp("python3", "python3", script.c_str(), nullptr);
      else execlp("python3", "python3", script.c_str(), args[0].c_str(), args[1].c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    REQUIRE(pid > 0);
    scratch.servers.push_back(pid);
    FILE* in = fdopen(out[0], "r");
    int port = 0;
    bool read = std::fscanf(in, "%d", &port) == 1;
    std::fclose(in);
    if (!read) FAIL("the python3 origin did not start");
    return port;
  }

  // Attaches a fresh listener under `policy` (made with these origins' ports).
  void attach(const json& policy, const std::string& sandbox = "box") {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(fd, 512) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    proxy_port = ntohs(a.sin_port);
    auto file = PolicyFile::parse(policy, "test", [](const std::string& name) -> std::optional<std::string> {
      if (name == "TOKEN") return "real-secret";
      return std::nullopt;
    });
    proxy->attach(sandbox, fd, file.for_conversation(""));
  }

  json standard_policy() const {
    std::string h = std::to_string(http_port), s = std::to_string(https_port);
    return {{"allow", {"allowed.test:" + h, "allowed.test:" + s, "other.test:" + h, "secret.test:" + h,
                       "pinned-denied.test", "*.wild.test:" + h, "closed.test:1"}},
            {"deny", {"10.0.0.0/8", "denied.test", "bad.wild.test"}},
            {"resolve", {{"allowed.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}, {"secret.test", "127.0.0.1"},
                         {"pinned-denied.test", "10.9.9.9"}, {"ok.wild.test", "127.0.0.1"},
                         {"bad.wild.test", "127.0.0.1"}, {"closed.test", "127.0.0.1"}}},
            {"secrets", {{{"host", "secret.test"}, {"header", "Authorization"}, {"value_from_env", "TOKEN"},
                          {"format", "Bearer {}"}}}}};
  }

  std::string curl(const std::string& args) {
    return output("curl -sS -m 20 -x http://127.0.0.1:" + std::to_string(proxy_port) + " " + args + " 2>&1");
  }
  std::string http(const std::string& host, const std::string& path = "/") const {
    return "http://" + host + ":" + std::to_string(http_port) + path;
  }
  std::string client_command(const std::string& args) const {
    return "python3 " + (dir / "client.py").string() + " " + std::to_string(proxy_port) + " " +
           (dir / "ca.pem").string() + " " + args + " 2>&1";
  }
  std::string client(const std::string& args) { return output(client_command(args)); }
  std::string connect_to(const std::string& host, int port) const {
    return "'CONNECT " + host + ":" + std::to_string(port) + " HTTP/1.1\r\nHost: x\r\n\r\n'";
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("plain HTTP is forwarded to allowed hosts and refused with a reason elsewhere", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string port = std::to_string(f.http_port);
  auto t0 = std::chrono::system_clock::now();
  CHECK(f.curl(f.http("allowed.test", "/a?b=1")) == "host=allowed.test:" + port + " auth=None x=None");
  // Origin form upstream; hop-by-hop headers, Proxy-* and what Connection names gone.
  std::string seen = f.curl("-H 'Connection: X-Hop' -H 'X-Hop: 1' -H 'Proxy-Authorization: Basic eA==' -H 'X-Kept: 2' " +
                            f.http("allowed.test", "/headers?q=1"));
  CHECK_THAT(seen, Catch::StartsWith("path=/headers?q=1\n") && Catch::Contains("X-Kept: 2") &&
                       Catch::Contains("Host: allowed.test:" + port));
  CHECK_THAT(seen, !Catch::Contains("X-Hop") && !Catch::Contains("Proxy-") && !Catch::Contains("Keep-Alive", Catch::CaseSensitive::No));

  std::string denied = f.curl("-i http://nowhere.test/");
  CHECK_THAT(denied, Catch::StartsWith("HTTP/1.1 403") && Catch::Contains("Content-Type: text/plain") &&
                         Catch::Contains("Connection: close"));
  CHECK_THAT(denied, Catch::Contains("agentbox network policy: nowhere.test:80 is not in the network allowlist"));
  CHECK_THAT(f.curl("-w ' %{http_code}' " + f.http("denied.test")),
             Catch::Contains("denied by rule 'denied.test'") && Catch::EndsWith(" 403"));
  // Deny wins over an allow entry that also covers the name.
  CHECK(f.curl(f.http("ok.wild.test")) == "host=ok.wild.test:" + port + " auth=None x=None");
  CHECK_THAT(f.curl("-w ' %{http_code}' " + f.http("bad.wild.test")),
             Catch::Contains("denied by rule 'bad.wild.test'") && Catch::EndsWith(" 403"));
  // IP literals only when listed; a pinned name whose address is denied is denied.
  CHECK_THAT(f.curl("-w ' %{http_code}' http://127.0.0.1:" + port + "/"),
             Catch::Contains("127.0.0.1:" + port) && Catch::EndsWith(" 403"));
  CHECK_THAT(f.curl("-w ' %{http_code}' http://pinned-denied.test/"),
             Catch::Contains("10.9.9.9") && Catch::Contains("10.0.0.0/8") && Catch::EndsWith(" 403"));
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(denials.size() == 5);
  CHECK(denials[0].host == "nowhere.test");
  CHECK(denials[0].port == 80);
  CHECK(denials[0].reason == "nowhere.test:80 is not in the network allowlist");
  CHECK(denials[2].host == "bad.wild.test");
  CHECK(denials[4].host == "pinned-denied.test");
  CHECK(f.proxy->denials("box", std::chrono::system_clock::now() + 1s).empty());
  CHECK(f.proxy->denials("other-box", t0).empty());

  // Allowed but nothing listens there: a 502 with a sentence, no denial.
  CHECK_THAT(f.curl("-w ' %{http_code}' http://closed.test:1/"),
             Catch::Contains("cannot connect to closed.test:1") && Catch::EndsWith(" 502"));
  CHECK(f.proxy->denials("box", t0).size() == 5);
}

TEST_CASE("one connection to the proxy carries requests to several hosts", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string port = std::to_string(f.http_port);
  // curl reuses its proxy connection: the second transfer makes no new one.
  CHECK(f.curl("-w ' connects=%{num_connects}\\n' " + f.http("allowed.test") + " " + f.http("other.test") + " " +
               f.http("allowed.test")) ==
        "host=allowed.test:" + port + " auth=None x=None connects=1\n" + "host=other.test:" + port +
            " auth=None x=None connects=0\n" + "host=allowed.test:" + port + " auth=None x=None connects=0\n");
}

TEST_CASE("a secret goes to its host only, not after a redirect elsewhere", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string port = std::to_string(f.http_port);
  CHECK(f.curl(f.http("secret.test")) == "host=secret.test:" + port + " auth=Bearer real-secret x=None");
  CHECK(f.curl(f.http("SECRET.test.")) == "host=secret.test:" + port + " auth=Bearer real-secret x=None");
  // The client's own Authorization is replaced, not added to.
  CHECK_THAT(f.curl("-H 'Authorization: Basic eA==' " + f.http("secret.test", "/headers")),
             Catch::Contains("Authorization: Bearer real-secret") && !Catch::Contains("Basic"));
  // The placeholder is replaced in the secret host's headers, and only there.
  CHECK(f.curl("-H 'X-Token: agentbox-secret:TOKEN' " + f.http("secret.test")) ==
        "host=secret.test:" + port + " auth=Bearer real-secret x=real-secret");
  CHECK_THAT(f.curl("-H 'X-Token: a agentbox-secret:TOKEN b agentbox-secret:TOKEN' -H 'X-Other: 1' -H 'X-Token: plain' " +
                    f.http("secret.test", "/headers")),
             Catch::Contains("X-Token: a real-secret b real-secret\nX-Token: plain\n") && Catch::Contains("X-Other: 1"));
  CHECK(f.curl("-H 'X-Token: agentbox-secret:TOKEN' " + f.http("allowed.test")) ==
        "host=allowed.test:" + port + " auth=None x=agentbox-secret:TOKEN");
  // Redirected to another host: that request carries no secret.
  CHECK(f.curl("-L " + f.http("secret.test", "/redirect?" + f.http("other.test", "/landed"))) ==
        "host=other.test:" + port + " auth=None x=None");
}

TEST_CASE("CONNECT tunnels TLS to allowed hosts whose server name matches", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string ca = (f.dir / "ca.pem").string();
  std::string https = "https://allowed.test:" + std::to_string(f.https_port);
  CHECK_THAT(f.curl("--cacert " + ca + " " + https + "/x"), Catch::StartsWith("host=allowed.test"));
  CHECK_THAT(f.curl("--cacert " + ca + " https://nowhere.test/"), Catch::Contains("403"));

  auto t0 = std::chrono::system_clock::now();
  std::string connect = f.connect_to("allowed.test", f.https_port);
  CHECK_THAT(f.client("tunnel " + connect + " allowed.test"), Catch::Contains("200") && Catch::Contains("handshake ok"));
  // The certificate also names other.test: only the proxy's check stops this one.
  CHECK_THAT(f.client("tunnel " + connect + " other.test"), Catch::Contains("handshake failed"));
  CHECK_THAT(f.client("tunnel " + connect + " 'raw:GET / HTTP/1.0\r\n\r\n'"), Catch::Contains("got b''"));
  CHECK_THAT(f.client("tunnel " + connect + " -"), Catch::Contains("handshake failed"));  // no SNI for a name
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(denials.size() == 3);
  CHECK(denials[0].reason == "TLS server name 'other.test' does not match CONNECT host 'allowed.test' (tunnel closed)");
  CHECK(denials[0].port == f.https_port);
  CHECK_THAT(denials[1].reason, Catch::Contains("did not start with a TLS ClientHello"));
  CHECK_THAT(denials[2].reason, Catch::Contains("named no server"));
  CHECK_THAT(f.client("tunnel 'CONNECT allowed.test HTTP/1.1\r\n\r\n' x"), Catch::Contains("400"));
}

TEST_CASE("an IP literal is reached only through an allow entry naming it", "[proxy]") {
  Fixture f;
  std::string h = std::to_string(f.http_port), s = std::to_string(f.https_port);
  f.attach({{"allow", {"127.0.0.1:" + h, "127.0.0.1:" + s}}});
  CHECK(f.curl("http://127.0.0.1:" + h + "/") == "host=127.0.0.1:" + h + " auth=None x=None");
  // A TLS client names no server for an address: that tunnel is allowed.
  CHECK_THAT(f.client("tunnel " + f.connect_to("127.0.0.1", f.https_port) + " -"), Catch::Contains("handshake ok"));
  CHECK_THAT(f.curl("-w ' %{http_code}' http://127.0.0.2:" + h + "/"), Catch::EndsWith(" 403"));
  CHECK(f.proxy->denials("box", {}).size() == 1);
}

TEST_CASE("bodies stream whole in bounded memory, and bad requests get 4xx without harm", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string proxy = "-x http://127.0.0.1:" + std::to_string(f.proxy_port);
  std::string sum = sha256_of("python3 -c \"import sys; sys.stdout.buffer.write((bytes(range(256)) * 4096 * 20)[:20 << 20])\"");
  // The proxy is this process: its peak memory must not grow by the body's size.
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current VmRSS
  auto kib = [](const char* key) {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::string(key).size()));
    return -1L;
  };
  long before = kib("VmRSS:");
  CHECK(sha256_of("curl -sS -m 60 " + proxy + " " + f.http("allowed.test", "/big?20")) == sum);
  long peak = kib("VmHWM:");
  REQUIRE(before > 0);
  CHECK(peak - before < 8 * 1024);  // a 20 MiB body held whole would show here

  // An upload streams too, with and without the client waiting for 100 Continue.
  std::string upload = (f.dir / "upload.bin").string();
  REQUIRE(run("head -c 8388608 /dev/urandom > " + upload) == 0);
  std::string expected = sha256_of("cat " + upload);
  CHECK(f.curl("--data-binary @" + upload + " " + f.http("allowed.test", "/up")) == expected);
  CHECK(f.curl("-H 'Expect: 100-continue' --data-binary @" + upload + " " + f.http("allowed.test", "/up")) == expected);

  std::string port = std::to_string(f.proxy_port);
  auto raw = [&](const std::string& bytes) {
    return output("printf '" + bytes + "' | curl -sS -m 5 telnet://127.0.0.1:" + port + " 2>&1");
  };
  CHECK_THAT(raw("GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"), Catch::StartsWith("HTTP/1.1 400") && Catch::Contains("absolute"));
  CHECK_THAT(raw("GET http://user:pw@allowed.test/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(raw("NOT HTTP AT ALL\\r\\n\\r\\n"), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(raw("POST http://allowed.test/ HTTP/1.1\\r\\nContent-Length: x\\r\\n\\r\\n"), Catch::StartsWith("HTTP/1.1 400"));
  std::string big(70 * 1024, 'a');
  CHECK_THAT(f.curl("-w ' %{http_code}' -H 'X-Big: " + big + "' " + f.http("allowed.test")), Catch::EndsWith(" 431"));
  // Still serving after all of that.
  CHECK_THAT(f.curl(f.http("allowed.test")), Catch::StartsWith("host=allowed.test"));
}

TEST_CASE("a box gets at most 256 connections at once", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  auto t0 = std::chrono::system_clock::now();
  CHECK(f.client("flood 300") == "closed 44\n");
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(!denials.empty());
  CHECK_THAT(denials.back().reason, Catch::Contains("256 connections"));
  CHECK(denials.size() <= 64);  // the ring keeps the last 64
  // The flood's connections close as its client exits; then the box is served again.
  std::string answer;
  for (int i = 0; i < 40 && answer.rfind("host=", 0) != 0; ++i, std::this_thread::sleep_for(50ms))
    answer = f.curl(f.http("allowed.test"));
  CHECK_THAT(answer, Catch::StartsWith("host=allowed.test"));
}

TEST_CASE("detach closes the listener and the box's connections; attach again replaces them", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  CHECK_THAT(f.curl(f.http("allowed.test")), Catch::StartsWith("host="));
  // An idle kept-alive connection and a request waiting on its origin end at once.
  std::string get = "'GET " + f.http("allowed.test") + " HTTP/1.1\r\nHost: x\r\n\r\n' ";
  std::string hang = "'GET " + f.http("allowed.test", "/hang") + " HTTP/1.1\r\nHost: x\r\n\r\n'";
  FILE* held = popen(f.client_command("hold " + get + hang).c_str(), "r");
  REQUIRE(held);
  char line[256] = {};
  REQUIRE(std::fgets(line, sizeof line, held));
  CHECK(std::string(line) == "ready\n");
  std::this_thread::sleep_for(300ms);  // the /hang request reaches its origin
  f.proxy->detach("box");
  std::string ends;
  while (std::fgets(line, sizeof line, held)) ends += line;
  pclose(held);
  CHECK_THAT(ends, Catch::Matches("closed after 0\\.\\d s\nclosed after 0\\.\\d s\n"));

  CHECK_THAT(f.curl(f.http("allowed.test")), !Catch::StartsWith("host="));
  f.attach(json{{"allow", json::array()}});  // the same sandbox, a stricter policy
  CHECK_THAT(f.curl("-w ' %{http_code}' " + f.http("allowed.test")), Catch::EndsWith(" 403"));
  f.proxy->detach("box");
  f.proxy->detach("box");  // idempotent
}

TEST_CASE("the proxy's end does not wait for origins or tunnels", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string hang = "'GET " + f.http("allowed.test", "/hang") + " HTTP/1.1\r\nHost: x\r\n\r\n' ";
  FILE* held = popen(f.client_command("hold " + hang + f.connect_to("allowed.test", f.https_port)).c_str(), "r");
  REQUIRE(held);
  char line[256] = {};
  REQUIRE(std::fgets(line, sizeof line, held));
  CHECK(std::string(line) == "ready\n");
  std::this_thread::sleep_for(300ms);
  auto start = std::chrono::steady_clock::now();
  f.proxy.reset();
  CHECK(seconds_since(start) < 3);  // not the 30 s the origin would take
  std::string ends;
  while (std::fgets(line, sizeof line, held)) ends += line;
  pclose(held);
  CHECK_THAT(ends, Catch::Matches("closed after 0\\.\\d s\nclosed after 0\\.\\d s\n"));
}

// HTTP/1.0 has no chunked coding: a chunked answer reaches a 1.0 client as
// its plain body, ended by the connection's close.
TEST_CASE("an HTTP/1.0 client gets a chunked answer unchunked", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string raw = f.curl("--raw -i --http1.0 " + f.http("allowed.test", "/chunked"));
  CHECK_THAT(raw, Catch::StartsWith("HTTP/1.1 200") && Catch::EndsWith("\r\n\r\nhello chunked world"));
  CHECK_THAT(raw, !Catch::Contains("chunked\r\n", Catch::CaseSensitive::No) && Catch::Contains("Connection: close"));
  // An HTTP/1.1 client gets it chunked (Beast may cut the chunks anew).
  CHECK_THAT(f.curl("--raw -i " + f.http("allowed.test", "/chunked")),
             Catch::Contains("Transfer-Encoding: chunked") && Catch::EndsWith("\r\n0\r\n\r\n"));
  CHECK(f.curl(f.http("allowed.test", "/chunked")) == "hello chunked world");
}
