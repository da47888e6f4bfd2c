// HTTPS interception (proxy_intercept.cpp): a CONNECT to a host with a
// secret ends at the proxy with a certificate of the proxy's CA, and each
// request inside reaches the origin over the proxy's own TLS, the origin's
// certificate verified against the test CA the proxy trusts (SSL_CERT_FILE,
// proxy_fixture.h). Real curl and python3 clients, a real python3 origin.
#include "proxy_fixture.h"

using namespace agentbox::network;
using namespace agentbox::network::test;

namespace {

struct Intercepted : Fixture {
  Intercepted() { attach(standard_policy()); }
  std::string agentbox_ca() const { return (dir / "agentbox-ca" / "ca.pem").string(); }
  std::string test_ca() const { return (dir / "ca.pem").string(); }
  std::string https(const std::string& host, const std::string& path = "/") const {
    return "https://" + host + ":" + std::to_string(https_port) + path;
  }
  // curl trusting the agentbox CA alone, as a box does for these hosts.
  std::string in_box(const std::string& args) { return curl("--cacert " + agentbox_ca() + " " + args); }
};

}  // namespace

TEST_CASE("HTTPS to a host with a secret gets the secret, and its placeholder is replaced", "[proxy]") {
  Intercepted f;
  std::string port = std::to_string(f.https_port);
  CHECK(f.in_box(f.https("secret.test")) == "host=secret.test:" + port + " auth=Bearer real-secret x=None");
  CHECK(f.in_box("-H 'X-Token: agentbox-secret:TOKEN' -H 'Authorization: Basic eA==' " + f.https("secret.test")) ==
        "host=secret.test:" + port + " auth=Bearer real-secret x=real-secret");
  // What the box sees is the agentbox CA's certificate for the host, over HTTP/1.1.
  std::string verbose = f.in_box("-v -o /dev/null " + f.https("secret.test"));
  CHECK_THAT(verbose, Catch::Contains("CN=agentbox sandbox egress CA") &&
                          Catch::Contains("subjectAltName: host \"secret.test\" matched"));
  CHECK_THAT(verbose, Catch::Contains("ALPN: server accepted http/1.1") || Catch::Contains("ALPN, server accepted to use http/1.1"));
  // Several requests on one connection; bodies stream both ways.
  CHECK(f.in_box("-w ' connects=%{num_connects}\\n' " + f.https("secret.test", "/a") + " " + f.https("secret.test", "/b")) ==
        "host=secret.test:" + port + " auth=Bearer real-secret x=None connects=1\n" + "host=secret.test:" + port +
            " auth=Bearer real-secret x=None connects=0\n");
  std::string sum = sha256_of("python3 -c \"import sys; sys.stdout.buffer.write((bytes(range(256)) * 4096 * 8)[:8 << 20])\"");
  CHECK(sha256_of("curl -sS -m 60 --cacert " + f.agentbox_ca() + " -x http://127.0.0.1:" + std::to_string(f.proxy_port) +
                  " " + f.https("secret.test", "/big?8")) == sum);
  std::string upload = (f.dir / "upload.bin").string();
  REQUIRE(run("head -c 4194304 /dev/urandom > " + upload) == 0);
  CHECK(f.in_box("--data-binary @" + upload + " " + f.https("secret.test", "/up")) == sha256_of("cat " + upload));
}

TEST_CASE("inside an intercepted connection only its host is served, and only under its own name", "[proxy]") {
  Intercepted f;
  auto t0 = std::chrono::system_clock::now();
  // Another host named inside the tunnel: 403 from the proxy, nothing sent on.
  std::string other = f.in_box("-w ' %{http_code}' -H 'Host: allowed.test:" + std::to_string(f.https_port) + "' " +
                               f.https("secret.test", "/headers"));
  CHECK_THAT(other, Catch::StartsWith("agentbox network policy: a request inside the TLS connection to secret.test:") &&
                        Catch::Contains("names the host 'allowed.test:") && Catch::EndsWith(" 403"));
  CHECK_THAT(other, !Catch::Contains("real-secret") && !Catch::Contains("path="));
  // A TLS server name other than the CONNECT host: closed before any TLS is served.
  std::string connect = f.connect_to("secret.test", f.https_port);
  CHECK_THAT(f.client("tunnel " + connect + " allowed.test"), Catch::Contains("handshake failed"));
  auto denials = f.proxy->denials("box", t0);
  REQUIRE(denials.size() == 2);
  CHECK_THAT(denials[0].reason, Catch::Contains("names the host 'allowed.test:"));
  CHECK(denials[1].reason == "TLS server name 'allowed.test' does not match CONNECT host 'secret.test' (tunnel closed)");
  // The CONNECT host's own name passes the same client's check of the proxy's certificate.
  std::string own = output("python3 " + (f.dir / "client.py").string() + " " + std::to_string(f.proxy_port) + " " +
                           f.agentbox_ca() + " tunnel " + connect + " secret.test 2>&1");
  CHECK_THAT(own, Catch::Contains("handshake ok"));
}

TEST_CASE("a host without a secret is tunnelled untouched: the box sees the origin's own certificate", "[proxy]") {
  Intercepted f;
  std::string verbose = f.curl("-v --cacert " + f.test_ca() + " " + f.https("allowed.test"));
  CHECK_THAT(verbose, Catch::Contains("issuer: CN=testca") && Catch::Contains("host=allowed.test"));
  CHECK_THAT(f.in_box("-w ' %{http_code}' " + f.https("allowed.test")), Catch::Contains("SSL certificate problem"));
}

TEST_CASE("an origin whose certificate does not verify gets 502 naming the host and the reason", "[proxy]") {
  Intercepted f;
  std::string port = std::to_string(f.https_port);
  // The origin's certificate (from the test CA) names allowed.test and secret.test, not wrongname.test.
  CHECK_THAT(f.in_box("-w ' %{http_code}' " + f.https("wrongname.test")),
             Catch::StartsWith("agentbox network proxy: cannot reach wrongname.test:" + port +
                               " over TLS: its certificate did not verify (hostname mismatch)") &&
                 Catch::EndsWith(" 502"));
  // A proxy that does not trust the test CA refuses secret.test's origin the same way.
  f.proxy.reset();
  REQUIRE(unsetenv("SSL_CERT_FILE") == 0);
  f.proxy.emplace(CertificateAuthority::open(f.dir / "agentbox-ca"));
  f.attach(f.standard_policy());
  CHECK_THAT(f.in_box("-w ' %{http_code}' " + f.https("secret.test")),
             Catch::Contains("cannot reach secret.test:" + port + " over TLS: its certificate did not verify (") &&
                 Catch::EndsWith(" 502"));
}
