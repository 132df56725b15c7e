#include "provisioner/launcher/google_auth.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

struct PkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

// Reads a PEM private key (PKCS#8 or PKCS#1), or, when `public_ok`, a public key.
PkeyPtr ReadKey(const std::string& pem, bool public_ok) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  if (key == nullptr && public_ok) {
    (void)BIO_reset(bio);
    key = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  }
  BIO_free(bio);
  ERR_clear_error();  // what failed above is not this thread's next error
  return PkeyPtr(key);
}

std::string FieldText(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string DefaultMetadataBase(const std::function<std::string(const std::string&)>& getenv) {
  std::string host = getenv("GCE_METADATA_HOST");
  if (host.empty()) return "http://metadata.google.internal";
  return absl::StartsWith(host, "http://") || absl::StartsWith(host, "https://")
             ? host
             : absl::StrCat("http://", host);
}

}  // namespace

std::string Base64UrlEncode(absl::string_view data) { return absl::WebSafeBase64Escape(data); }

absl::StatusOr<std::string> Base64UrlDecode(absl::string_view text) {
  std::string out;
  if (!absl::WebSafeBase64Unescape(text, &out)) return absl::InvalidArgumentError("not base64url");
  return out;
}

absl::StatusOr<std::string> SignRs256(absl::string_view data, const std::string& private_key_pem) {
  PkeyPtr key = ReadKey(private_key_pem, /*public_ok=*/false);
  if (key == nullptr) {
    return absl::InvalidArgumentError("private_key: not a PEM private key OpenSSL can read");
  }
  if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) {
    return absl::InvalidArgumentError("private_key: not an RSA key (RS256 needs one)");
  }
  MdCtxPtr ctx(EVP_MD_CTX_new());
  size_t size = 0;
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size, reinterpret_cast<const unsigned char*>(data.data()),
                     data.size()) != 1) {
    ERR_clear_error();
    return absl::InternalError("RS256: OpenSSL could not set up the signature");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    ERR_clear_error();
    return absl::InternalError("RS256: OpenSSL could not sign");
  }
  signature.resize(size);
  return signature;
}

bool VerifyRs256(absl::string_view data, absl::string_view signature, const std::string& key_pem) {
  PkeyPtr key = ReadKey(key_pem, /*public_ok=*/true);
  if (key == nullptr || EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx != nullptr &&
      EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(data.data()),
                       data.size()) == 1;
  ERR_clear_error();
  return ok;
}

absl::StatusOr<std::string> SignJwsRs256(absl::string_view header, absl::string_view payload,
                                         const std::string& private_key_pem) {
  std::string input = absl::StrCat(Base64UrlEncode(header), ".", Base64UrlEncode(payload));
  absl::StatusOr<std::string> signature = SignRs256(input, private_key_pem);
  if (!signature.ok()) return signature.status();
  return absl::StrCat(input, ".", Base64UrlEncode(*signature));
}

absl::StatusOr<ServiceAccountKey> ParseServiceAccountKey(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return absl::InvalidArgumentError("service account key: not a JSON object");
  }
  const std::string type = FieldText(doc, "type");
  if (type != "service_account") {
    return absl::InvalidArgumentError(
        absl::StrCat("service account key: type = \"", type,
                     "\": expected service_account (a key file from `gcloud iam "
                     "service-accounts keys create`)"));
  }
  ServiceAccountKey key;
  key.client_email = FieldText(doc, "client_email");
  key.private_key_id = FieldText(doc, "private_key_id");
  key.private_key = FieldText(doc, "private_key");
  key.project_id = FieldText(doc, "project_id");
  if (std::string uri = FieldText(doc, "token_uri"); !uri.empty()) key.token_uri = uri;
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"client_email", &key.client_email},
        {"private_key", &key.private_key}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("service account key: ", field, " is missing or empty"));
    }
  }
  if (UrlOrigin(key.token_uri).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("service account key: token_uri = \"",
                                                   key.token_uri, "\": expected an https URL"));
  }
  if (ReadKey(key.private_key, /*public_ok=*/false) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("service account key of ", key.client_email,
                     ": private_key is not a PEM private key OpenSSL can read"));
  }
  return key;
}

absl::StatusOr<ServiceAccountKey> ReadServiceAccountKey(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("service account key file \"", path, "\" cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ServiceAccountKey> key = ParseServiceAccountKey(text.str());
  if (!key.ok()) {
    return absl::Status(key.status().code(), absl::StrCat(path, ": ", key.status().message()));
  }
  return key;
}

absl::StatusOr<std::string> ServiceAccountAssertion(const ServiceAccountKey& key,
                                                    const std::string& scope, absl::Time now,
                                                    absl::Duration lifetime) {
  json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (!key.private_key_id.empty()) header["kid"] = key.private_key_id;
  const int64_t iat = absl::ToUnixSeconds(now);
  // nlohmann's objects keep their keys sorted, so the bytes signed are deterministic.
  json claims = {{"iss", key.client_email},
                 {"scope", scope},
                 {"aud", key.token_uri},
                 {"iat", iat},
                 {"exp", iat + absl::ToInt64Seconds(lifetime)}};
  return SignJwsRs256(header.dump(), claims.dump(), key.private_key);
}

absl::StatusOr<AccessToken> ExchangeJwtAssertion(const std::string& token_uri,
                                                 const std::string& assertion, absl::Time now,
                                                 absl::Duration timeout) {
  absl::StatusOr<HttpResponse> response =
      HttpSend({.method = "POST",
                .url = token_uri,
                .headers = {{"Content-Type", "application/x-www-form-urlencoded"}},
                .body = QueryString({{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"},
                                     {"assertion", assertion}}),
                .timeout = timeout});
  const std::string where = absl::StrCat("Google token endpoint ", UrlForMessages(token_uri));
  if (!response.ok()) return response.status();
  if (response->status == 200) return ParseTokenResponse(response->body, now, where);
  json error = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  std::string what = absl::StrCat("HTTP ", response->status);
  if (error.is_object()) {
    const std::string code = FieldText(error, "error");
    const std::string description = FieldText(error, "error_description");
    if (!code.empty()) what = absl::StrCat(code, description.empty() ? "" : ": ", description);
  }
  if (response->status >= 500 || response->status == 429) {
    return absl::UnavailableError(absl::StrCat(where, ": ", what));
  }
  return absl::UnauthenticatedError(
      absl::StrCat(where, " refused the service account's signed assertion: ", what,
                   " (is the key revoked, or this machine's clock off?)"));
}

absl::StatusOr<AccessToken> GceMetadataToken(const std::string& metadata_base, absl::Time now,
                                             absl::Duration timeout) {
  const std::string url =
      absl::StrCat(metadata_base, "/computeMetadata/v1/instance/service-accounts/default/token");
  absl::StatusOr<HttpResponse> response =
      HttpSend({.url = url, .headers = {{"Metadata-Flavor", "Google"}}, .timeout = timeout});
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    const std::string what = absl::StrCat("GCE metadata server ", url, ": HTTP ", response->status);
    if (response->status >= 500) return absl::UnavailableError(what);
    return absl::UnauthenticatedError(absl::StrCat(what, " (does the VM have a service account?)"));
  }
  return ParseTokenResponse(response->body, now, absl::StrCat("GCE metadata server ", url));
}

std::shared_ptr<CachedTokenSource> ServiceAccountTokenSource(ServiceAccountKey key,
                                                             const std::string& scope,
                                                             absl::Duration timeout,
                                                             absl::Time (*now)(),
                                                             const std::string& origin) {
  std::string description = absl::StrCat("service account ", key.client_email);
  if (!origin.empty()) absl::StrAppend(&description, " (", origin, ")");
  return std::make_shared<CachedTokenSource>(
      description,
      [key = std::move(key), scope, timeout, now]() -> absl::StatusOr<AccessToken> {
        const absl::Time at = now();
        absl::StatusOr<std::string> assertion = ServiceAccountAssertion(key, scope, at);
        if (!assertion.ok()) return assertion.status();
        return ExchangeJwtAssertion(key.token_uri, *assertion, at, timeout);
      },
      absl::Minutes(5), now);
}

absl::StatusOr<std::shared_ptr<CachedTokenSource>> GoogleTokenSource(
    const GoogleCredentialOptions& options) {
  auto getenv = options.getenv ? options.getenv : [](const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return std::string(value == nullptr ? "" : value);
  };
  std::vector<std::string> tried;
  std::string file = options.key_file;
  std::string origin = "key file " + file;
  if (file.empty()) {
    file = getenv("GOOGLE_APPLICATION_CREDENTIALS");
    origin = "GOOGLE_APPLICATION_CREDENTIALS=" + file;
  }
  if (!file.empty()) {
    absl::StatusOr<ServiceAccountKey> key = ReadServiceAccountKey(file);
    if (!key.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat("Google credentials: ", key.status().message()));
    }
    return ServiceAccountTokenSource(*std::move(key), options.scope, options.timeout, options.now,
                                     origin);
  }
  tried.push_back("no key file given and GOOGLE_APPLICATION_CREDENTIALS is not set");

  std::string base =
      options.metadata_url.empty() ? DefaultMetadataBase(getenv) : options.metadata_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  absl::StatusOr<HttpResponse> probe =
      HttpSend({.url = base + "/computeMetadata/v1/instance/service-accounts/default/email",
                .headers = {{"Metadata-Flavor", "Google"}},
                .timeout = options.metadata_probe_timeout});
  if (probe.ok() && probe->status == 200 && probe->Header("metadata-flavor") == "Google") {
    const std::string email(absl::StripAsciiWhitespace(probe->body));
    const absl::Duration timeout = options.timeout;
    absl::Time (*now)() = options.now;
    return std::make_shared<CachedTokenSource>(
        absl::StrCat("the VM's service account ", email, " (metadata server ", base, ")"),
        [base, timeout, now]() { return GceMetadataToken(base, now(), timeout); }, absl::Minutes(5),
        now);
  }
  tried.push_back(absl::StrCat(
      "the metadata server ", base, " ",
      probe.ok() ? absl::StrCat("answered HTTP ", probe->status, " without Metadata-Flavor: Google")
                 : "did not answer (not a GCE VM)"));
  return absl::UnauthenticatedError(
      absl::StrCat("no Google credentials found (", absl::StrJoin(tried, "; "),
                   "): give a service account key file (provider.credentials_file or "
                   "GOOGLE_APPLICATION_CREDENTIALS), or run on a GCE VM with a service account"));
}

}  // namespace spotdnn::launcher
