#include "provisioner/launcher/s3_client.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/http_retry.h"

namespace spotdnn::launcher {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { xmlInitParser(); });
}

struct XmlDocDeleter {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using XmlDocPtr = std::unique_ptr<xmlDoc, XmlDocDeleter>;

XmlDocPtr ParseXml(const std::string& text) {
  return XmlDocPtr(xmlReadMemory(text.data(), static_cast<int>(text.size()), "s3.xml", nullptr,
                                 XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
}

bool Named(const xmlNode* node, const char* name) {
  return node != nullptr && node->type == XML_ELEMENT_NODE &&
         xmlStrcmp(node->name, reinterpret_cast<const xmlChar*>(name)) == 0;
}

const xmlNode* Child(const xmlNode* node, const char* name) {
  if (node == nullptr) return nullptr;
  for (const xmlNode* c = node->children; c != nullptr; c = c->next) {
    if (Named(c, name)) return c;
  }
  return nullptr;
}

std::string Text(const xmlNode* node) {
  if (node == nullptr) return "";
  xmlChar* content = xmlNodeGetContent(node);
  std::string out = content == nullptr ? "" : reinterpret_cast<const char*>(content);
  xmlFree(content);
  return out;
}

std::string ChildText(const xmlNode* node, const char* name) { return Text(Child(node, name)); }

bool ValidBucket(absl::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' || c == '-')) return false;
  }
  return absl::ascii_isalnum(bucket.front()) && absl::ascii_isalnum(bucket.back());
}

// S3's retry traits: 5xx, 429, SlowDown and timeouts are transient.
bool RetryableS3Error(long status, const std::string& code) {
  return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError" || code == "ServiceUnavailable";
}

struct ParsedEndpoint {
  std::string scheme;
  std::string authority;
};

absl::StatusOr<ParsedEndpoint> ParseEndpoint(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_url = \"", url, "\": expected http(s)://HOST[:PORT]"));
  }
  ParsedEndpoint out;
  out.scheme = absl::AsciiStrToLower(url.substr(0, scheme_end));
  if (out.scheme != "http" && out.scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_url = \"", url, "\": the scheme must be http or https"));
  }
  std::string rest = url.substr(scheme_end + 3);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_url = \"", url, "\": expected http(s)://HOST[:PORT] with no path"));
  }
  out.authority = rest;
  return out;
}

}  // namespace

absl::StatusOr<S3Location> ParseS3Uri(absl::string_view field, absl::string_view uri) {
  absl::string_view rest = uri;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", uri, "\": expected s3://BUCKET[/PREFIX]"));
  }
  const size_t slash = rest.find('/');
  S3Location out;
  out.bucket = std::string(rest.substr(0, slash));
  if (!ValidBucket(out.bucket)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", uri, "\": bucket \"", out.bucket,
                     "\" is not a bucket name (3-63 of a-z 0-9 . -)"));
  }
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = rest.substr(slash + 1);
    while (absl::ConsumePrefix(&prefix, "/")) {
    }
    while (absl::ConsumeSuffix(&prefix, "/")) {
    }
    out.prefix = std::string(prefix);
  }
  return out;
}

absl::Status S3ErrorToStatus(const std::string& action, const std::string& what, long http_status,
                             const std::string& code, const std::string& message) {
  const std::string detail = absl::StrCat(action, " ", what, ": ",
                                          code.empty() ? absl::StrCat("HTTP ", http_status) : code,
                                          message.empty() ? "" : absl::StrCat(": ", message));
  if (code == "NoSuchKey" || code == "NoSuchBucket" || (code.empty() && http_status == 404)) {
    return absl::NotFoundError(detail);
  }
  if (code == "AccessDenied" || code == "AllAccessDisabled" ||
      (code.empty() && http_status == 403)) {
    return absl::PermissionDeniedError(
        absl::StrCat(detail, " (allow ", action, " on the bucket or prefix)"));
  }
  if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "ExpiredToken" ||
      code == "TokenRefreshRequired" || code == "InvalidToken" || http_status == 401) {
    return absl::UnauthenticatedError(detail);
  }
  if (RetryableS3Error(http_status, code)) return absl::UnavailableError(detail);
  return absl::InvalidArgumentError(detail);
}

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(Options options) {
  if (options.region.empty()) options.region = "us-east-1";
  for (char c : options.region) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("region = \"", options.region, "\": expected a name like us-east-1"));
    }
  }
  if (!options.endpoint_url.empty()) {
    if (auto e = ParseEndpoint(options.endpoint_url); !e.ok()) return e.status();
  }
  if (options.credentials.access_key_id.empty() || options.credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("credentials ", options.credentials.DebugString(),
                     ": need an access key id and a secret access key"));
  }
  if (absl::Status s = ValidateCloudRetry(options.retry); !s.ok()) return s;
  return std::unique_ptr<S3Client>(new S3Client(std::move(options)));
}

std::string S3Client::ObjectUrl(const std::string& bucket, const std::string& key) const {
  const std::string path = UriEncode(absl::StrCat("/", key), true);
  if (!options_.endpoint_url.empty()) {
    auto e = ParseEndpoint(options_.endpoint_url);
    return absl::StrCat(e->scheme, "://", e->authority, "/", bucket, path);
  }
  const std::string domain =
      absl::StartsWith(options_.region, "cn-") ? "amazonaws.com.cn" : "amazonaws.com";
  // A bucket name with dots does not match the wildcard certificate: path-style for those.
  if (absl::StrContains(bucket, '.')) {
    return absl::StrCat("https://s3.", options_.region, ".", domain, "/", bucket, path);
  }
  return absl::StrCat("https://", bucket, ".s3.", options_.region, ".", domain, path);
}

absl::StatusOr<std::string> S3Client::Call(
    const std::string& method, const std::string& bucket, const std::string& key,
    const std::vector<std::pair<std::string, std::string>>& query, const std::string& body,
    const std::string& action) {
  GlobalInit();
  const std::string what = absl::StrCat("s3://", bucket, "/", key);
  std::string url = ObjectUrl(bucket, key);
  if (!query.empty()) absl::StrAppend(&url, "?", FormEncode(query));
  HttpRequest request{
      .method = method, .url = url, .body = body, .timeout = options_.request_timeout};
  if (method == "PUT") request.headers.emplace_back("Content-Type", "application/octet-stream");
  SigV4Signer signer(
      options_.credentials,
      {.region = options_.region, .service = "s3", .normalize_path = false, .sign_body = true},
      options_.now);
  absl::StatusOr<HttpResponse> response = SendWithRetries(
      request, absl::StrCat(action, " ", what), retry_, &signer,
      [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
        if (answer.status >= 200 && answer.status < 300) return std::nullopt;
        std::string code, message;
        if (XmlDocPtr doc = ParseXml(answer.body); doc != nullptr) {
          const xmlNode* root = xmlDocGetRootElement(doc.get());
          if (Named(root, "Error")) {
            code = ChildText(root, "Code");
            message = ChildText(root, "Message");
          }
        }
        return HttpFailure{.status = S3ErrorToStatus(action, what, answer.status, code, message),
                           .retryable = RetryableS3Error(answer.status, code)};
      });
  if (!response.ok()) return response.status();
  return std::move(response->body);
}

absl::Status S3Client::PutObject(const std::string& bucket, const std::string& key,
                                 const std::string& body) {
  return Call("PUT", bucket, key, {}, body, "s3:PutObject").status();
}

absl::StatusOr<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  return Call("GET", bucket, key, {}, "", "s3:GetObject");
}

absl::StatusOr<std::vector<S3Object>> S3Client::ListObjects(const std::string& bucket,
                                                            const std::string& prefix) {
  std::vector<S3Object> objects;
  std::string token;
  for (int page = 0;; ++page) {
    std::vector<std::pair<std::string, std::string>> query = {{"list-type", "2"},
                                                              {"prefix", prefix}};
    if (!token.empty()) query.emplace_back("continuation-token", token);
    absl::StatusOr<std::string> body = Call("GET", bucket, "", query, "", "s3:ListBucket");
    if (!body.ok()) return body.status();
    XmlDocPtr doc = ParseXml(*body);
    const xmlNode* root = doc == nullptr ? nullptr : xmlDocGetRootElement(doc.get());
    if (!Named(root, "ListBucketResult")) {
      return absl::UnavailableError(absl::StrCat("s3:ListBucket s3://", bucket, "/", prefix,
                                                 ": the answer is not a ListBucketResult"));
    }
    for (const xmlNode* c = root->children; c != nullptr; c = c->next) {
      if (!Named(c, "Contents")) continue;
      S3Object object;
      object.key = ChildText(c, "Key");
      object.etag = ChildText(c, "ETag");
      if (!absl::SimpleAtoi(ChildText(c, "Size"), &object.size)) object.size = -1;
      objects.push_back(std::move(object));
    }
    if (ChildText(root, "IsTruncated") != "true") break;
    const std::string next = ChildText(root, "NextContinuationToken");
    if (next.empty() || next == token) {
      return absl::UnavailableError(absl::StrCat("s3:ListBucket s3://", bucket, "/", prefix,
                                                 ": a truncated page without a new "
                                                 "continuation token (page ",
                                                 page + 1, ")"));
    }
    token = next;
  }
  return objects;
}

}  // namespace spotdnn::launcher
