#include "provisioner/launcher/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace spotdnn::launcher {
namespace {

constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 0xf]);
  }
  return out;
}

bool Unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

// Trims and collapses runs of whitespace (spaces, tabs and the line breaks of folded header
// values) into one space.
std::string CanonicalHeaderValue(absl::string_view value) {
  std::string out;
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

std::string NormalizePath(absl::string_view path) {
  std::vector<absl::string_view> segments;
  for (absl::string_view segment : absl::StrSplit(path, '/')) {
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.push_back(segment);
  }
  std::string out = "/" + absl::StrJoin(segments, "/");
  if (!segments.empty() && !path.empty() && path.back() == '/') out.push_back('/');
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [key, value] : query) {
    encoded.emplace_back(UriEncode(key, false), UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::vector<std::string> parts;
  parts.reserve(encoded.size());
  for (const auto& [key, value] : encoded) parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(parts, "&");
}

struct CanonicalHeaders {
  std::string text;            // "name:value\n" per header
  std::string signed_headers;  // "a;b;c"
};

CanonicalHeaders Canonicalize(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::map<std::string, std::string> merged;
  for (const auto& [name, value] : headers) {
    std::string key = absl::AsciiStrToLower(name);
    std::string canonical = CanonicalHeaderValue(value);
    auto [it, inserted] = merged.emplace(key, canonical);
    if (!inserted) absl::StrAppend(&it->second, ",", canonical);
  }
  CanonicalHeaders out;
  std::vector<std::string> names;
  for (const auto& [name, value] : merged) {
    absl::StrAppend(&out.text, name, ":", value, "\n");
    names.push_back(name);
  }
  out.signed_headers = absl::StrJoin(names, ";");
  return out;
}

absl::Status Validate(const HttpRequestToSign& request, const AwsCredentials& credentials,
                      const SigningParams& params) {
  if (request.method.empty()) return absl::InvalidArgumentError("request method is empty");
  bool has_host = false;
  for (const auto& [name, value] : request.headers) {
    if (absl::AsciiStrToLower(name) == "host" && !value.empty()) has_host = true;
  }
  if (!has_host) return absl::InvalidArgumentError("request has no Host header");
  if (credentials.access_key_id.empty()) {
    return absl::InvalidArgumentError("credentials: access key id is empty");
  }
  if (credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "credentials: secret access key is empty for access key ", credentials.access_key_id));
  }
  if (params.region.empty()) return absl::InvalidArgumentError("signing region is empty");
  if (params.service.empty()) return absl::InvalidArgumentError("signing service is empty");
  return absl::OkStatus();
}

struct Scope {
  std::string amz_date;  // 20150830T123600Z
  std::string date;      // 20150830
  std::string scope;     // 20150830/us-east-1/service/aws4_request
};

Scope MakeScope(const SigningParams& params) {
  Scope s;
  s.amz_date = absl::FormatTime("%Y%m%dT%H%M%SZ", params.time, absl::UTCTimeZone());
  s.date = s.amz_date.substr(0, 8);
  s.scope = absl::StrCat(s.date, "/", params.region, "/", params.service, "/aws4_request");
  return s;
}

std::string CanonicalRequest(const HttpRequestToSign& request, const SigningParams& params,
                             const std::vector<std::pair<std::string, std::string>>& query,
                             const CanonicalHeaders& headers, const std::string& payload_hash) {
  std::string path = params.normalize_path ? NormalizePath(request.path) : request.path;
  if (path.empty()) path = "/";
  return absl::StrCat(request.method, "\n", UriEncode(path, true), "\n", CanonicalQuery(query),
                      "\n", headers.text, "\n", headers.signed_headers, "\n", payload_hash);
}

std::string Signature(const AwsCredentials& credentials, const SigningParams& params,
                      const Scope& scope, const std::string& string_to_sign) {
  std::string key = HmacSha256(absl::StrCat("AWS4", credentials.secret_access_key), scope.date);
  key = HmacSha256(key, params.region);
  key = HmacSha256(key, params.service);
  key = HmacSha256(key, "aws4_request");
  std::string mac = HmacSha256(key, string_to_sign);
  return Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

}  // namespace

std::string AwsCredentials::DebugString() const {
  return absl::StrCat(access_key_id.empty() ? "(no access key)" : access_key_id,
                      session_token.empty() ? "" : " with a session token", " (from ",
                      source.empty() ? "unknown source" : source, ")");
}

std::string UriEncode(absl::string_view text, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

std::string UriDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &size);
  return std::string(reinterpret_cast<const char*>(mac), size);
}

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& params) {
  std::vector<std::string> parts;
  parts.reserve(params.size());
  for (const auto& [key, value] : params) {
    parts.push_back(absl::StrCat(UriEncode(key, false), "=", UriEncode(value, false)));
  }
  return absl::StrJoin(parts, "&");
}

absl::StatusOr<SignedParts> SignWithHeaders(const HttpRequestToSign& request,
                                            const AwsCredentials& credentials,
                                            const SigningParams& params) {
  if (absl::Status s = Validate(request, credentials, params); !s.ok()) return s;
  Scope scope = MakeScope(params);
  std::string payload_hash = Sha256Hex(request.body);

  SignedParts out;
  std::vector<std::pair<std::string, std::string>> headers = request.headers;
  if (params.sign_body) out.additions.emplace_back("x-amz-content-sha256", payload_hash);
  out.additions.emplace_back("X-Amz-Date", scope.amz_date);
  bool token_signed = !credentials.session_token.empty() && !params.omit_session_token;
  if (token_signed) out.additions.emplace_back("X-Amz-Security-Token", credentials.session_token);
  headers.insert(headers.end(), out.additions.begin(), out.additions.end());
  CanonicalHeaders canonical = Canonicalize(headers);

  out.canonical_request = CanonicalRequest(request, params, request.query, canonical, payload_hash);
  out.string_to_sign = absl::StrCat(kAlgorithm, "\n", scope.amz_date, "\n", scope.scope, "\n",
                                    Sha256Hex(out.canonical_request));
  out.signature = Signature(credentials, params, scope, out.string_to_sign);
  if (!credentials.session_token.empty() && params.omit_session_token) {
    out.additions.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  out.additions.emplace_back(
      "Authorization",
      absl::StrCat(kAlgorithm, " Credential=", credentials.access_key_id, "/", scope.scope,
                   ", SignedHeaders=", canonical.signed_headers, ", Signature=", out.signature));
  return out;
}

absl::StatusOr<SignedParts> SignWithQuery(const HttpRequestToSign& request,
                                          const AwsCredentials& credentials,
                                          const SigningParams& params) {
  if (absl::Status s = Validate(request, credentials, params); !s.ok()) return s;
  Scope scope = MakeScope(params);
  CanonicalHeaders canonical = Canonicalize(request.headers);

  SignedParts out;
  out.additions = {
      {"X-Amz-Algorithm", kAlgorithm},
      {"X-Amz-Credential", absl::StrCat(credentials.access_key_id, "/", scope.scope)},
      {"X-Amz-Date", scope.amz_date},
      {"X-Amz-SignedHeaders", canonical.signed_headers},
      {"X-Amz-Expires", absl::StrCat(params.expires_seconds)},
  };
  bool has_token = !credentials.session_token.empty();
  if (has_token && !params.omit_session_token) {
    out.additions.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  std::vector<std::pair<std::string, std::string>> query = request.query;
  query.insert(query.end(), out.additions.begin(), out.additions.end());

  out.canonical_request =
      CanonicalRequest(request, params, query, canonical, Sha256Hex(request.body));
  out.string_to_sign = absl::StrCat(kAlgorithm, "\n", scope.amz_date, "\n", scope.scope, "\n",
                                    Sha256Hex(out.canonical_request));
  out.signature = Signature(credentials, params, scope, out.string_to_sign);
  if (has_token && params.omit_session_token) {
    out.additions.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  out.additions.emplace_back("X-Amz-Signature", out.signature);
  return out;
}

}  // namespace spotdnn::launcher
