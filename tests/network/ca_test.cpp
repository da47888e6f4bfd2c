// The egress CA (network/ca.h): made once per directory with its key 0600,
// loaded again unchanged, and its leaf certificates verify against it for
// their host only (checked by the openssl command, not by our own code).
#include "network/ca.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace agentbox::network;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/agentbox-ca-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

int run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

}  // namespace

TEST_CASE("the egress CA is made once, its key private, and signs certificates for one host") {
  if (run("openssl version") != 0) FAIL("the openssl command is needed to check certificates");
  TempDir dir;
  auto ca = CertificateAuthority::open(dir.path / "network");
  struct stat st{};
  REQUIRE(stat((dir.path / "network" / "ca.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(stat((dir.path / "network").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(ca->certificate_pem().find("BEGIN CERTIFICATE") != std::string::npos);

  auto again = CertificateAuthority::open(dir.path / "network");
  CHECK(again->certificate_pem() == ca->certificate_pem());

  Pem leaf = ca->leaf_for("api.example.test");
  CHECK(ca->leaf_for("api.example.test").certificate == leaf.certificate);  // kept
  std::ofstream(dir.path / "leaf.pem") << leaf.certificate;
  std::ofstream(dir.path / "leaf.key") << leaf.key;
  std::string ca_file = (dir.path / "network" / "ca.pem").string(), leaf_file = (dir.path / "leaf.pem").string();
  CHECK(run("openssl verify -CAfile " + ca_file + " -purpose sslserver " + leaf_file) == 0);
  CHECK(run("openssl verify -CAfile " + ca_file + " -verify_hostname api.example.test " + leaf_file) == 0);
  CHECK(run("openssl verify -CAfile " + ca_file + " -verify_hostname other.test " + leaf_file) != 0);
  // The CA cannot be used as a leaf, nor a leaf as a CA.
  Pem ip = ca->leaf_for("10.1.2.3");
  std::ofstream(dir.path / "ip.pem") << ip.certificate;
  CHECK(run("openssl verify -CAfile " + ca_file + " -verify_ip 10.1.2.3 " + (dir.path / "ip.pem").string()) == 0);
  CHECK(run("openssl verify -CAfile " + leaf_file + " " + (dir.path / "ip.pem").string()) != 0);
  // A damaged key is an error with a sentence, not a new CA that boxes do not trust.
  std::ofstream(dir.path / "network" / "ca.key") << "garbage";
  CHECK_THROWS_AS(CertificateAuthority::open(dir.path / "network"), CaError);
}
