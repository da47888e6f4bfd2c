// Incremental SHA-256 (OpenSSL EVP), the digest every snapshot records.
// The algorithm is fetched at construction, so a forked child only runs
// update/final and takes none of OpenSSL's global locks.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace agentbox::persistence {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) throw std::runtime_error("SHA-256 unavailable");
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size) { EVP_DigestUpdate(ctx_, data, size); }
  // "sha256:<hex>"; call once.
  std::string finish() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out = "sha256:";
    for (unsigned i = 0; i < len; ++i) {
      out += kHex[md[i] >> 4];
      out += kHex[md[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace agentbox::persistence
