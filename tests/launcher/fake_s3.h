// A local S3-compatible endpoint for tests: cpp-httplib on 127.0.0.1 (any free port), path-style
// (ENDPOINT/BUCKET/KEY), answering PutObject, GetObject and ListObjectsV2 (pages of
// `page_size`, continuation tokens) with S3's XML shapes and error documents. Every request's
// SigV4 signature is checked with the secret it knows, and x-amz-content-sha256 against the body,
// as S3 does; tests can inject errors.
#ifndef SPOTDNN_TESTS_LAUNCHER_FAKE_S3_H_
#define SPOTDNN_TESTS_LAUNCHER_FAKE_S3_H_

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace spotdnn::launcher::testing {

// The fake S3 endpoint.
class FakeS3 {
 public:
  // An error the next matching request gets (`times` times).
  struct Injected {
    std::string method;  // "GET", "PUT"; empty: any
    int http_status = 503;
    std::string code = "SlowDown";
    std::string message = "Please reduce your request rate.";
    int times = 1;
    std::string retry_after;  // a Retry-After header to send with it; empty: none
  };

  // Accepts requests signed by `access_key_id` with `secret_access_key` (and carrying
  // `session_token` when not empty). Buckets must be created first.
  FakeS3(std::string access_key_id, std::string secret_access_key, std::string session_token = "");
  ~FakeS3();

  std::string url() const;
  void CreateBucket(const std::string& bucket);
  void Inject(Injected error);
  void set_page_size(int n);
  // Stores an object directly (no request).
  void PutDirect(const std::string& bucket, const std::string& key, const std::string& body);
  // The bucket's objects, key -> bytes.
  std::map<std::string, std::string> objects(const std::string& bucket) const;
  // "METHOD /path" (with "?list" for listings) of every request, signature failures included.
  std::vector<std::string> requests() const;

 private:
  void Handle(const httplib::Request& request, httplib::Response& response);
  std::string VerifySignature(const httplib::Request& request);  // "" when OK, else the code

  std::string access_key_id_;
  std::string secret_access_key_;
  std::string session_token_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::deque<Injected> injected_;
  int page_size_ = 1000;
  std::map<std::string, std::map<std::string, std::string>> buckets_;
  std::vector<std::string> requests_;
};

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_FAKE_S3_H_
