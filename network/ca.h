// The certificate authority a state directory's boxes trust for the hosts
// whose requests get a secret at egress (docs/network.md, "Secrets at
// egress"): the proxy ends TLS from the box with a certificate this CA signs
// for the host, adds the header, and opens its own TLS to the origin. Only
// the boxes trust it (their CA bundle), never the host; its key stays in the
// state directory (0600, never bound into a box, never in a snapshot).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace agentbox::network {

class CaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A certificate and its private key, PEM.
struct Pem {
  std::string certificate;
  std::string key;
};

class CertificateAuthority {
 public:
  // Loads dir/ca.pem and dir/ca.key, or makes them (EC P-256, 10 years; the
  // key written 0600 before the certificate, each by rename). Throws CaError.
  static std::shared_ptr<CertificateAuthority> open(const std::filesystem::path& dir);
  ~CertificateAuthority();

  const std::string& certificate_pem() const { return ca_.certificate; }
  // A server certificate for `host` (a DNS name or an IP literal), signed by
  // this CA, valid from an hour ago for 30 days; made once per host and kept.
  // Throws CaError.
  Pem leaf_for(const std::string& host);

 private:
  struct Keys;
  CertificateAuthority();
  Pem ca_;
  std::unique_ptr<Keys> keys_;
  std::mutex mutex_;
  std::map<std::string, Pem> leaves_;
};

}  // namespace agentbox::network
