// The egress proxy (network/proxy.h) against real servers on the host's
// loopback and real clients (curl, python3's socket and ssl): plain HTTP,
// CONNECT tunnels, limits and the proxy's end (proxy_fixture.h). HTTPS
// interception has its own file, intercept_test.cpp.
#include "proxy_fixture.h"

using namespace agentbox::network;
using namespace agentbox::network::test;

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
  CHECK_THAT(f.client("tunnel " + connect + " 'raw:hello there\r\n\r\n'"), Catch::Contains("got b''"));
  CHECK_THAT(f.client("tunnel " + connect + " -"), Catch::Contains("handshake failed"));  // no SNI for a name
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(denials.size() == 3);
  CHECK(denials[0].reason == "TLS server name 'other.test' does not match CONNECT host 'allowed.test' (tunnel closed)");
  CHECK(denials[0].port == f.https_port);
  CHECK_THAT(denials[1].reason, Catch::Contains("neither a TLS ClientHello nor an HTTP request"));
  CHECK_THAT(denials[2].reason, Catch::Contains("named no server"));
  CHECK_THAT(f.client("tunnel 'CONNECT allowed.test HTTP/1.1\r\n\r\n' x"), Catch::Contains("400"));
}

// undici's proxy agent (Node's fetch) sends http:// through CONNECT: the
// tunnel then carries plain HTTP, served for the CONNECT host alone.
TEST_CASE("plain HTTP inside a CONNECT tunnel is served for the CONNECT host only", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  const std::string port = std::to_string(f.http_port);
  const std::string connect = f.connect_to("allowed.test", f.http_port);
  auto in_tunnel = [&](const std::string& requests) { return f.client("tunnel " + connect + " 'raw:" + requests + "'"); };
  auto t0 = std::chrono::system_clock::now();
  CHECK_THAT(in_tunnel("GET /x HTTP/1.1\r\nHost: allowed.test:" + port + "\r\n\r\n"),
             Catch::Contains("got b'HTTP/1.1 200 OK"));  // the client shows the answer's first 100 bytes
  // curl's own way: --proxytunnel sends http:// through CONNECT too; two requests on one tunnel.
  CHECK(f.curl("-p " + f.http("allowed.test", "/a") + " " + f.http("allowed.test", "/b")) ==
        "host=allowed.test:" + port + " auth=None x=None" + "host=allowed.test:" + port + " auth=None x=None");
  CHECK(f.proxy->denials("box", t0).empty());
  // Another host named inside, or an absolute URL: 403, nothing upstream.
  CHECK_THAT(in_tunnel("GET /x HTTP/1.1\r\nHost: other.test:" + port + "\r\n\r\n"), Catch::Contains("got b'HTTP/1.1 403"));
  CHECK_THAT(in_tunnel("GET http://other.test/ HTTP/1.1\r\nHost: allowed.test:" + port + "\r\n\r\n"),
             Catch::Contains("got b'HTTP/1.1 403"));
  CHECK_THAT(in_tunnel("GET / HTTP/1.0\r\n\r\n"), Catch::Contains("got b'HTTP/1.1 403"));  // no Host at all
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(denials.size() == 3);
  CHECK(denials[0].reason == "a request inside the tunnel to allowed.test:" + port + " names the host 'other.test:" + port +
                                 "' (only allowed.test:" + port + " is served there)");
  CHECK(denials[0].host == "allowed.test");
  CHECK(denials[0].port == f.http_port);
  CHECK_THAT(denials[1].reason, Catch::StartsWith("inside the tunnel to allowed.test:" + port + " a request's target is a path"));
  CHECK_THAT(denials[2].reason, Catch::Contains("names the host ''"));
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

// Bodies the proxy passes on unchanged are spliced (network/splice.h): one
// ended by the origin's close arrives whole, and a client that leaves in the
// middle of a body ends that transfer only.
TEST_CASE("a body ended by the origin's close arrives whole; a client leaving mid-body harms nothing", "[proxy]") {
  Fixture f;
  f.attach(f.standard_policy());
  std::string proxy = "-x http://127.0.0.1:" + std::to_string(f.proxy_port);
  std::string sum = sha256_of("python3 -c \"import sys; sys.stdout.buffer.write((bytes(range(256)) * 4096 * 20)[:20 << 20])\"");
  std::string head = output("curl -sS -m 60 -D - -o /dev/null " + proxy + " " + f.http("allowed.test", "/eof?20"));
  CHECK_THAT(head, !Catch::Contains("Content-Length", Catch::CaseSensitive::No) && Catch::Contains("Connection: close"));
  CHECK(sha256_of("curl -sS -m 60 " + proxy + " " + f.http("allowed.test", "/eof?20")) == sum);
  for (const char* path : {"/big?64", "/eof?64"})
    CHECK(output("curl -sS -m 60 " + proxy + " " + f.http("allowed.test", path) + " 2>/dev/null | head -c 100000 | wc -c") ==
          "100000\n");
  CHECK(sha256_of("curl -sS -m 60 " + proxy + " " + f.http("allowed.test", "/big?20")) == sum);
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
