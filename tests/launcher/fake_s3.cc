#include "tests/launcher/fake_s3.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "libxml/entities.h"
#include "libxml/xmlmemory.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher::testing {
namespace {

std::string Escape(const std::string& text) {
  xmlChar* encoded = xmlEncodeSpecialChars(nullptr, reinterpret_cast<const xmlChar*>(text.c_str()));
  std::string out = encoded != nullptr ? reinterpret_cast<const char*>(encoded) : "";
  xmlFree(encoded);
  return out;
}

std::string ErrorXml(const std::string& code, const std::string& message,
                     const std::string& resource) {
  return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>", code,
                      "</Code><Message>", Escape(message), "</Message><Resource>", Escape(resource),
                      "</Resource><RequestId>FAKE0001</RequestId></Error>");
}

}  // namespace

FakeS3::FakeS3(std::string access_key_id, std::string secret_access_key, std::string session_token)
    : access_key_id_(std::move(access_key_id)),
      secret_access_key_(std::move(secret_access_key)),
      session_token_(std::move(session_token)),
      server_(std::make_unique<httplib::Server>()) {
  auto handler = [this](const httplib::Request& request, httplib::Response& response) {
    Handle(request, response);
  };
  server_->Get(".*", handler);
  server_->Put(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeS3::~FakeS3() {
  server_->stop();
  thread_.join();
}

std::string FakeS3::url() const { return absl::StrCat("http://127.0.0.1:", port_); }

void FakeS3::CreateBucket(const std::string& bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_[bucket];
}

void FakeS3::Inject(Injected error) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_.push_back(std::move(error));
}

void FakeS3::set_page_size(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  page_size_ = n;
}

void FakeS3::PutDirect(const std::string& bucket, const std::string& key, const std::string& body) {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_[bucket][key] = body;
}

std::map<std::string, std::string> FakeS3::objects(const std::string& bucket) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(bucket);
  return it == buckets_.end() ? std::map<std::string, std::string>{} : it->second;
}

std::vector<std::string> FakeS3::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::string FakeS3::VerifySignature(const httplib::Request& request) {
  const std::string authorization = request.get_header_value("Authorization");
  absl::string_view rest = authorization;
  if (!absl::ConsumePrefix(&rest, "AWS4-HMAC-SHA256 ")) return "AccessDenied";
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(rest, ", ")) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) return "AuthorizationHeaderMalformed";
    fields[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
  }
  std::vector<std::string> scope = absl::StrSplit(fields["Credential"], '/');
  if (scope.size() != 5 || scope[3] != "s3") return "AuthorizationHeaderMalformed";
  if (scope[0] != access_key_id_) return "InvalidAccessKeyId";
  if (!session_token_.empty() &&
      request.get_header_value("X-Amz-Security-Token") != session_token_) {
    return "InvalidToken";
  }
  // S3 refuses a body whose hash is not the one signed.
  const std::string content_sha = request.get_header_value("x-amz-content-sha256");
  if (content_sha.empty()) return "InvalidRequest";
  if (content_sha != Sha256Hex(request.body)) return "XAmzContentSHA256Mismatch";
  HttpRequestToSign to_sign{.method = request.method, .path = request.path, .body = request.body};
  for (const auto& [key, value] : request.params) to_sign.query.emplace_back(key, value);
  for (absl::string_view name : absl::StrSplit(fields["SignedHeaders"], ';')) {
    const std::string header(name);
    if (header == "x-amz-date" || header == "x-amz-security-token" ||
        header == "x-amz-content-sha256") {
      continue;  // the signer adds these itself
    }
    to_sign.headers.emplace_back(header, request.get_header_value(header.c_str()));
  }
  SigningParams params{
      .region = scope[2], .service = "s3", .normalize_path = false, .sign_body = true};
  const std::string date = request.get_header_value("X-Amz-Date");
  std::string error;
  if (date.size() != 16 ||
      !absl::ParseTime(
          absl::RFC3339_full,
          absl::StrCat(date.substr(0, 4), "-", date.substr(4, 2), "-", date.substr(6, 2), "T",
                       date.substr(9, 2), ":", date.substr(11, 2), ":", date.substr(13, 2), "Z"),
          &params.time, &error)) {
    return "AuthorizationHeaderMalformed";
  }
  AwsCredentials credentials{.access_key_id = access_key_id_,
                             .secret_access_key = secret_access_key_,
                             .session_token = session_token_};
  absl::StatusOr<SignedParts> expected = SignWithHeaders(to_sign, credentials, params);
  if (!expected.ok() || expected->signature != fields["Signature"]) {
    return "SignatureDoesNotMatch";
  }
  return "";
}

void FakeS3::Handle(const httplib::Request& request, httplib::Response& response) {
  // Path-style: /BUCKET[/KEY].
  absl::string_view path = request.path;
  absl::ConsumePrefix(&path, "/");
  const size_t slash = path.find('/');
  const std::string bucket(path.substr(0, slash));
  const std::string key =
      slash == absl::string_view::npos ? "" : std::string(path.substr(slash + 1));
  const bool listing = request.method == "GET" && key.empty();
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back(absl::StrCat(request.method, " ", request.path, listing ? "?list" : ""));
  auto reply_error = [&](int status, const std::string& code, const std::string& message) {
    response.status = status;
    response.set_content(ErrorXml(code, message, request.path), "application/xml");
  };
  if (const std::string bad = VerifySignature(request); !bad.empty()) {
    const int status = bad == "InvalidRequest" || bad == "XAmzContentSHA256Mismatch" ||
                               bad == "AuthorizationHeaderMalformed"
                           ? 400
                           : 403;
    return reply_error(status, bad, "the request's authentication did not check out");
  }
  for (auto it = injected_.begin(); it != injected_.end(); ++it) {
    if (!it->method.empty() && it->method != request.method) continue;
    const Injected error = *it;
    if (--it->times <= 0) injected_.erase(it);
    if (!error.retry_after.empty()) response.set_header("Retry-After", error.retry_after);
    return reply_error(error.http_status, error.code, error.message);
  }
  auto found = buckets_.find(bucket);
  if (found == buckets_.end()) {
    return reply_error(404, "NoSuchBucket", "The specified bucket does not exist");
  }
  std::map<std::string, std::string>& objects = found->second;
  if (request.method == "PUT") {
    if (key.empty()) return reply_error(400, "InvalidRequest", "no key");
    objects[key] = request.body;
    response.set_header("ETag", absl::StrCat("\"", Sha256Hex(request.body).substr(0, 32), "\""));
    response.status = 200;
    return;
  }
  if (!listing) {
    auto object = objects.find(key);
    if (object == objects.end()) {
      return reply_error(404, "NoSuchKey", "The specified key does not exist.");
    }
    response.set_content(object->second, "application/octet-stream");
    return;
  }
  if (request.get_param_value("list-type") != "2") {
    return reply_error(400, "InvalidArgument", "only ListObjectsV2 (list-type=2) is served");
  }
  const std::string prefix = request.get_param_value("prefix");
  std::string after;
  if (request.has_param("continuation-token")) {
    if (!absl::Base64Unescape(request.get_param_value("continuation-token"), &after)) {
      return reply_error(400, "InvalidArgument", "The continuation token provided is incorrect");
    }
  }
  std::string contents;
  int count = 0;
  std::string last;
  bool truncated = false;
  for (auto it = after.empty() ? objects.lower_bound(prefix) : objects.upper_bound(after);
       it != objects.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (count == page_size_) {
      truncated = true;
      break;
    }
    absl::StrAppend(&contents, "<Contents><Key>", Escape(it->first),
                    "</Key><LastModified>2026-11-23T00:00:00.000Z</LastModified><ETag>&quot;",
                    Sha256Hex(it->second).substr(0, 32), "&quot;</ETag><Size>", it->second.size(),
                    "</Size><StorageClass>STANDARD</StorageClass></Contents>");
    last = it->first;
    ++count;
  }
  std::string body =
      absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                   "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>",
                   bucket, "</Name><Prefix>", Escape(prefix), "</Prefix><KeyCount>", count,
                   "</KeyCount><MaxKeys>", page_size_, "</MaxKeys><IsTruncated>",
                   truncated ? "true" : "false", "</IsTruncated>", contents);
  if (truncated) {
    absl::StrAppend(&body, "<NextContinuationToken>", Escape(absl::Base64Escape(last)),
                    "</NextContinuationToken>");
  }
  absl::StrAppend(&body, "</ListBucketResult>");
  response.set_content(body, "application/xml");
}

}  // namespace spotdnn::launcher::testing
