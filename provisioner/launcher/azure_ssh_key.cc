// An ephemeral SSH public key (ssh-rsa, the private half never kept): what Azure requires of a
// Linux VM that no one logs into.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "provisioner/launcher/azure_provider.h"

namespace spotdnn::launcher {
namespace {

// An SSH wire-format string or mpint: 4-byte big-endian length, then the bytes.
void AppendSshField(std::string& out, absl::string_view bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(bytes.data(), bytes.size());
}

std::string Mpint(const BIGNUM* bn) {
  std::string bytes(BN_num_bytes(bn), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
  if (!bytes.empty() && (static_cast<unsigned char>(bytes[0]) & 0x80)) bytes.insert(0, 1, '\0');
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> EphemeralSshPublicKey() {
  EVP_PKEY* key = EVP_RSA_gen(2048);
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InternalError("OpenSSL could not generate an RSA key");
  }
  BIGNUM* n = nullptr;
  BIGNUM* e = nullptr;
  const bool ok = EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_N, &n) == 1 &&
                  EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_E, &e) == 1;
  std::string blob;
  if (ok) {
    AppendSshField(blob, "ssh-rsa");
    AppendSshField(blob, Mpint(e));
    AppendSshField(blob, Mpint(n));
  }
  BN_free(n);
  BN_free(e);
  EVP_PKEY_free(key);  // the private half is never kept
  ERR_clear_error();
  if (!ok) return absl::InternalError("OpenSSL could not read the RSA key's modulus");
  return absl::StrCat("ssh-rsa ", absl::Base64Escape(blob), " spotdnn-ephemeral");
}

}  // namespace spotdnn::launcher
