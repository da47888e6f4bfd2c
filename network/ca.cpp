#include "network/ca.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace agentbox::network {

namespace fs = std::filesystem;

namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

[[noreturn]] void fail(const std::string& what) {
  char text[256] = "no detail";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  throw CaError("network CA: " + what + " (" + text + ")");
}

Key new_key() {
  Key key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) fail("cannot make a key");
  return key;
}

std::string key_pem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    fail("cannot write a key");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

std::string cert_pem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) fail("cannot write a certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) fail("cannot make the extension " + value);
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) fail("cannot add the extension " + value);
}

// A certificate for common_name and key, issued by issuer (itself when null); sign() signs it.
Cert make_cert(const std::string& common_name, EVP_PKEY* key, X509* issuer, long not_before, long valid_seconds) {
  Cert cert(X509_new());
  if (!cert) fail("cannot make a certificate");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) fail("no random serial");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()))) fail("cannot set the serial");
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), valid_seconds);
  if (X509_set_pubkey(cert.get(), key) != 1) fail("cannot set the key");
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("agentbox"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  return cert;
}

void sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) == 0) fail("cannot sign a certificate");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Written whole or not at all: a temporary file, synced, renamed in.
void write_file(const fs::path& path, const std::string& text, mode_t mode) {
  fs::path temp = path.string() + ".new";
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw CaError("network CA: cannot write " + temp.string());
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fchmod(fd, mode) == 0 &&
            fsync(fd) == 0;
  close(fd);
  if (!ok || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    throw CaError("network CA: cannot write " + path.string());
  }
}

bool is_ip(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

struct CertificateAuthority::Keys {
  Key ca_key;
  Cert ca_cert;
  Key leaf_key;  // one key for every leaf: made once, certificates are cheap
};

CertificateAuthority::CertificateAuthority() : keys_(std::make_unique<Keys>()) {}
CertificateAuthority::~CertificateAuthority() = default;

std::shared_ptr<CertificateAuthority> CertificateAuthority::open(const fs::path& dir) {
  std::shared_ptr<CertificateAuthority> ca(new CertificateAuthority());
  std::error_code ec;
  fs::create_directories(dir, ec);
  chmod(dir.c_str(), 0700);
  fs::path key_path = dir / "ca.key", cert_path = dir / "ca.pem";
  if (fs::exists(key_path) && fs::exists(cert_path)) {
    ca->ca_.key = read_file(key_path);
    ca->ca_.certificate = read_file(cert_path);
    Bio kb(BIO_new_mem_buf(ca->ca_.key.data(), static_cast<int>(ca->ca_.key.size())));
    ca->keys_->ca_key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
    Bio cb(BIO_new_mem_buf(ca->ca_.certificate.data(), static_cast<int>(ca->ca_.certificate.size())));
    ca->keys_->ca_cert.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    if (!ca->keys_->ca_key || !ca->keys_->ca_cert || X509_check_private_key(ca->keys_->ca_cert.get(), ca->keys_->ca_key.get()) != 1)
      fail("cannot read " + cert_path.string() + " and " + key_path.string() + " (remove both to make new ones)");
  } else {
    ca->keys_->ca_key = new_key();
    ca->keys_->ca_cert = make_cert("agentbox sandbox egress CA", ca->keys_->ca_key.get(), nullptr, -3600,
                                   10L * 365 * 24 * 3600);
    X509* cert = ca->keys_->ca_cert.get();
    add_extension(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_extension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_extension(cert, cert, NID_subject_key_identifier, "hash");
    sign(cert, ca->keys_->ca_key.get());
    ca->ca_.key = key_pem(ca->keys_->ca_key.get());
    ca->ca_.certificate = cert_pem(cert);
    write_file(key_path, ca->ca_.key, 0600);  // the key first: a certificate never lacks its key
    write_file(cert_path, ca->ca_.certificate, 0644);
  }
  ca->keys_->leaf_key = new_key();
  return ca;
}

Pem CertificateAuthority::leaf_for(const std::string& host) {
  std::lock_guard lock(mutex_);
  if (auto found = leaves_.find(host); found != leaves_.end()) return found->second;
  if (host.empty() || host.size() > 253) throw CaError("network CA: no certificate for the host '" + host + "'");
  Cert cert = make_cert(host.size() <= 64 ? host : "agentbox", keys_->leaf_key.get(), keys_->ca_cert.get(), -3600,
                        30L * 24 * 3600);
  add_extension(cert.get(), keys_->ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_extension(cert.get(), keys_->ca_cert.get(), NID_key_usage, "critical,digitalSignature");
  add_extension(cert.get(), keys_->ca_cert.get(), NID_ext_key_usage, "serverAuth");
  add_extension(cert.get(), keys_->ca_cert.get(), NID_subject_alt_name, (is_ip(host) ? "IP:" : "DNS:") + host);
  add_extension(cert.get(), keys_->ca_cert.get(), NID_authority_key_identifier, "keyid:always");
  sign(cert.get(), keys_->ca_key.get());
  Pem leaf{cert_pem(cert.get()), key_pem(keys_->leaf_key.get())};
  if (leaves_.size() > 1024) leaves_.clear();  // bounded: a box naming many hosts cannot grow it
  leaves_.emplace(host, leaf);
  return leaf;
}

}  // namespace agentbox::network
