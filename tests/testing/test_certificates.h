// Certificates made at run time for TLS tests, with the OpenSSL library: a CA, a server
// certificate for 127.0.0.1 and localhost and a client certificate both signed by it, and a rogue
// CA that signs a client certificate of its own. Keys are P-256; everything is valid for a day.
#ifndef SPOTDNN_TESTS_TESTING_TEST_CERTIFICATES_H_
#define SPOTDNN_TESTS_TESTING_TEST_CERTIFICATES_H_

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace spotdnn::testing {

// Paths of the PEM files MakeTestCertificates wrote.
struct TestCertificates {
  std::string ca_cert;
  std::string server_cert, server_key;  // CN localhost, SAN IP:127.0.0.1, DNS:localhost
  std::string client_cert, client_key;  // signed by ca_cert
  std::string rogue_ca_cert;
  std::string rogue_client_cert, rogue_client_key;  // signed by rogue_ca_cert only
};

namespace internal {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

inline void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test certificates: ") + what);
}

inline Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  Check(key != nullptr, "EC key generation");
  return key;
}

// A certificate for `key` named `common_name`, signed by `issuer` (self-signed when null).
inline Cert NewCert(const std::string& common_name, EVP_PKEY* key, X509* issuer_cert,
                    EVP_PKEY* issuer_key, bool is_ca, const std::string& subject_alt_names) {
  static long serial = 1;
  Cert cert(X509_new());
  X509* x = cert.get();
  Check(X509_set_version(x, 2) == 1, "version");
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  Check(X509_set_pubkey(x, key) == 1, "public key");
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, issuer_cert != nullptr ? X509_get_subject_name(issuer_cert) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer_cert != nullptr ? issuer_cert : x, x, nullptr, nullptr, 0);
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE"},
      {NID_key_usage, is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"},
      {NID_subject_key_identifier, "hash"},
  };
  if (!subject_alt_names.empty()) extensions.push_back({NID_subject_alt_name, subject_alt_names});
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    Check(ext != nullptr, "extension");
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  Check(X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0, "signature");
  return cert;
}

inline void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr, "open for writing");
  const bool ok = cert != nullptr
                      ? PEM_write_X509(f, cert) == 1
                      : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  Check(ok, "PEM write");
}

}  // namespace internal

// Writes the certificates and keys into `dir` (created if missing). Throws on an OpenSSL failure.
inline TestCertificates MakeTestCertificates(const std::filesystem::path& dir) {
  using namespace internal;
  std::filesystem::create_directories(dir);
  auto path = [&](const char* name) { return (dir / name).string(); };
  TestCertificates files{path("ca.pem"),           path("server.pem"),      path("server.key"),
                         path("client.pem"),       path("client.key"),      path("rogue-ca.pem"),
                         path("rogue-client.pem"), path("rogue-client.key")};

  Key ca_key = NewKey(), server_key = NewKey(), client_key = NewKey();
  Key rogue_ca_key = NewKey(), rogue_client_key = NewKey();
  Cert ca = NewCert("spotdnn test CA", ca_key.get(), nullptr, nullptr, true, "");
  Cert server = NewCert("localhost", server_key.get(), ca.get(), ca_key.get(), false,
                        "IP:127.0.0.1,DNS:localhost");
  Cert client = NewCert("spotdnn test client", client_key.get(), ca.get(), ca_key.get(), false, "");
  Cert rogue_ca = NewCert("spotdnn test CA", rogue_ca_key.get(), nullptr, nullptr, true, "");
  Cert rogue_client = NewCert("spotdnn test client", rogue_client_key.get(), rogue_ca.get(),
                              rogue_ca_key.get(), false, "");

  WritePem(files.ca_cert, ca.get(), nullptr);
  WritePem(files.server_cert, server.get(), nullptr);
  WritePem(files.server_key, nullptr, server_key.get());
  WritePem(files.client_cert, client.get(), nullptr);
  WritePem(files.client_key, nullptr, client_key.get());
  WritePem(files.rogue_ca_cert, rogue_ca.get(), nullptr);
  WritePem(files.rogue_client_cert, rogue_client.get(), nullptr);
  WritePem(files.rogue_client_key, nullptr, rogue_client_key.get());
  return files;
}

}  // namespace spotdnn::testing

#endif  // SPOTDNN_TESTS_TESTING_TEST_CERTIFICATES_H_
