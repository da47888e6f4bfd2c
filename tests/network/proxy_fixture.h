// The fixture of the egress proxy's tests (proxy_test.cpp, intercept_test.cpp):
// real servers on the host's loopback, a python3 HTTP origin and an HTTPS one
// with a certificate from a test CA made by the openssl command, which the
// proxy (this process) trusts through SSL_CERT_FILE, as the server would; the
// proxy has a CA of its own (network/ca.h) for the hosts it intercepts. The
// proxy listens on a socket the test makes, as the sandbox side does inside
// a box. A missing curl, python3 or openssl fails the test: nothing here
// passes by not running.
#pragma once

#include "network/ca.h"
#include "network/policy.h"
#include "network/proxy.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace agentbox::network::test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;


// /          "host=H auth=A x=X" of the request's Host, Authorization, X-Token
// /headers   the path and every header as received
// /big?N     N MiB of a fixed pattern;  /redirect?URL  a 302 to URL
// /hang      answers after 30 s;        POST           the body's sha256
// /chunked   "hello chunked world" in three chunks
inline constexpr const char* kOrigin = R"(import hashlib, http.server, ssl, sys, time
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
        if self.path.startswith("/eof"):  # no length: the body ends with the connection
            n = int(self.path.split("?")[1]) << 20
            self.send_response(200)
            self.end_headers()
            block = bytes(range(256)) * 4096
            while n > 0:
                self.wfile.write(block[:min(n, len(block))])
                n -= len(block)
            self.close_connection = True
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
inline constexpr const char* kClient = R"(import socket, ssl, sys, time
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

inline int run(const std::string& command) { return std::system(("(" + command + ") >/dev/null 2>&1").c_str()); }

inline std::string output(const std::string& command) {
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
inline std::string sha256_of(const std::string& command) {
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
  std::optional<Proxy> proxy;

  Fixture() {
    for (const char* tool : {"curl --version", "python3 --version", "openssl version", "sha256sum --version"})
      if (run(tool) != 0) FAIL(std::string("this test needs `") + tool + "` to work");
    std::ofstream(dir / "origin.py") << kOrigin;
    std::ofstream(dir / "client.py") << kClient;
    REQUIRE(run("cd " + dir.string() +
                " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=testca"
                " && openssl req -newkey rsa:2048 -nodes -keyout o.key -out o.csr -subj /CN=allowed.test"
                " && printf 'subjectAltName=DNS:allowed.test,DNS:other.test,DNS:secret.test\\n' > san"
                " && openssl x509 -req -in o.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out o.pem -days 2 -extfile san") == 0);
    http_port = start({});
    https_port = start({(dir / "o.pem").string(), (dir / "o.key").string()});
    // The server's side trusts the test CA as a server given SSL_CERT_FILE
    // would; the proxy reads it as it starts.
    REQUIRE(setenv("SSL_CERT_FILE", (dir / "ca.pem").c_str(), 1) == 0);
    proxy.emplace(CertificateAuthority::open(dir / "agentbox-ca"));
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
                       "secret.test:" + s, "wrongname.test:" + s, "pinned-denied.test", "*.wild.test:" + h, "closed.test:1"}},
            {"deny", {"10.0.0.0/8", "denied.test", "bad.wild.test"}},
            {"resolve", {{"allowed.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}, {"secret.test", "127.0.0.1"},
                         {"pinned-denied.test", "10.9.9.9"}, {"ok.wild.test", "127.0.0.1"},
                         {"bad.wild.test", "127.0.0.1"}, {"closed.test", "127.0.0.1"},
                         {"wrongname.test", "127.0.0.1"}}},
            {"secrets", {{{"host", "secret.test"}, {"header", "Authorization"}, {"value_from_env", "TOKEN"},
                          {"format", "Bearer {}"}},
                         {{"host", "wrongname.test"}, {"header", "Authorization"}, {"value_from_env", "TOKEN"},
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

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}


}  // namespace agentbox::network::test
