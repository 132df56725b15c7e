// The S3 client against the fake S3 endpoint (signatures checked): objects in and out, listings
// across pages, errors mapped to statuses, retries, URL styles, and no secret in any message.
#include "provisioner/launcher/s3_client.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launcher/fake_s3.h"

namespace spotdnn::launcher {
namespace {

using testing::FakeS3;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKeyId[] = "AKIDEXAMPLE";
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr char kToken[] = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN";

class S3ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { s3_.CreateBucket("ckpt"); }

  std::unique_ptr<S3Client> Client(const std::string& secret = kSecret,
                                   const std::string& token = kToken) {
    S3Client::Options o;
    o.region = "eu-west-1";
    o.endpoint_url = s3_.url();
    o.credentials = {.access_key_id = kKeyId, .secret_access_key = secret, .session_token = token};
    o.retry.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    auto c = S3Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  FakeS3 s3_{kKeyId, kSecret, kToken};
  std::vector<absl::Duration> sleeps_;
};

TEST_F(S3ClientTest, PutThenGetReturnsTheBytes) {
  auto c = Client();
  std::string binary("ck\0pt\xff\n", 7);
  for (const std::string key :
       {"job-1/ps-0.json", "job-1/sub dir/model+epoch=3.pt", "job-1/ünïcode/ä.bin", "top"}) {
    ASSERT_TRUE(c->PutObject("ckpt", key, binary + key).ok()) << key;
    auto got = c->GetObject("ckpt", key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(*got, binary + key);
  }
  EXPECT_EQ(s3_.objects("ckpt").size(), 4u);
  EXPECT_EQ(s3_.objects("ckpt").at("job-1/sub dir/model+epoch=3.pt"),
            binary + "job-1/sub dir/model+epoch=3.pt");
  // An empty object is an object.
  ASSERT_TRUE(c->PutObject("ckpt", "empty", "").ok());
  EXPECT_EQ(c->GetObject("ckpt", "empty").value(), "");
}

TEST_F(S3ClientTest, ListFollowsContinuationTokensAndKeepsToThePrefix) {
  s3_.set_page_size(2);
  for (const std::string key : {"a/1", "a/2", "a/3", "a/4 x", "a/5", "b/1", "a0"}) {
    s3_.PutDirect("ckpt", key, "body of " + key);
  }
  auto c = Client();
  auto objects = c->ListObjects("ckpt", "a/");
  ASSERT_TRUE(objects.ok()) << objects.status();
  std::vector<std::string> keys;
  for (const S3Object& o : *objects) keys.push_back(o.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a/1", "a/2", "a/3", "a/4 x", "a/5"}));
  EXPECT_EQ((*objects)[3].size, static_cast<int64_t>(std::string("body of a/4 x").size()));
  int listings = 0;
  for (const std::string& r : s3_.requests()) listings += absl::EndsWith(r, "?list");
  EXPECT_EQ(listings, 3);  // 2 + 2 + 1
  auto all = c->ListObjects("ckpt", "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 7u);
  auto none = c->ListObjects("ckpt", "zzz/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(S3ClientTest, ErrorsMapToStatusesNamingTheObject) {
  auto c = Client();
  auto missing = c->GetObject("ckpt", "nope/ps-0.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("s3://ckpt/nope/ps-0.json: NoSuchKey"));
  EXPECT_EQ(c->ListObjects("other-bucket", "").status().code(), absl::StatusCode::kNotFound);

  s3_.Inject(
      {.method = "PUT", .http_status = 403, .code = "AccessDenied", .message = "Access Denied"});
  absl::Status denied = c->PutObject("ckpt", "k", "v");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.message()), HasSubstr("s3:PutObject"));
  EXPECT_TRUE(sleeps_.empty());  // not retried
}

TEST_F(S3ClientTest, WrongCredentialsAreUnauthenticatedAndNeverQuoted) {
  auto wrong_secret = Client("not-the-secret-key-0123456789");
  absl::Status s = wrong_secret->PutObject("ckpt", "k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("not-the-secret-key")));
  auto no_token = Client(kSecret, "");
  absl::Status t = no_token->PutObject("ckpt", "k", "v");
  EXPECT_EQ(t.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(t.message()), Not(HasSubstr(kSecret)));
  EXPECT_TRUE(s3_.objects("ckpt").empty());
}

TEST_F(S3ClientTest, SlowDownHonoursRetryAfter) {
  auto c = Client();
  s3_.Inject({.method = "PUT", .http_status = 503, .code = "SlowDown", .retry_after = "4"});
  ASSERT_TRUE(c->PutObject("ckpt", "k", "v").ok());
  // The server's wait; the backoff is capped at 20 s like every other cloud client's.
  EXPECT_EQ(sleeps_, std::vector<absl::Duration>{absl::Seconds(4)});
}

TEST_F(S3ClientTest, ThrottlingAndServerErrorsAreRetried) {
  auto c = Client();
  s3_.Inject({.method = "PUT", .http_status = 503, .code = "SlowDown", .times = 2});
  ASSERT_TRUE(c->PutObject("ckpt", "k", "v").ok());
  EXPECT_EQ(sleeps_.size(), 2u);
  EXPECT_EQ(s3_.objects("ckpt").at("k"), "v");

  s3_.Inject({.method = "GET", .http_status = 500, .code = "InternalError", .times = 10});
  auto got = c->GetObject("ckpt", "k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("gave up after 4 attempts"));
}

TEST_F(S3ClientTest, AnUnreachableEndpointIsUnavailable) {
  S3Client::Options o;
  o.endpoint_url = "http://127.0.0.1:1";
  o.credentials = {.access_key_id = kKeyId, .secret_access_key = kSecret};
  o.retry.max_attempts = 2;
  o.retry.sleep = [](absl::Duration) {};
  auto c = S3Client::Create(o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->GetObject("ckpt", "k").status().code(), absl::StatusCode::kUnavailable);
}

TEST(S3Client, UrlStyles) {
  S3Client::Options o;
  o.region = "us-west-2";
  o.credentials = {.access_key_id = kKeyId, .secret_access_key = kSecret};
  auto aws = S3Client::Create(o);
  ASSERT_TRUE(aws.ok());
  EXPECT_EQ((*aws)->ObjectUrl("my-bucket", "job 1/ps-0.json"),
            "https://my-bucket.s3.us-west-2.amazonaws.com/job%201/ps-0.json");
  EXPECT_EQ((*aws)->ObjectUrl("my.bucket", "k"), "https://s3.us-west-2.amazonaws.com/my.bucket/k");
  o.endpoint_url = "http://127.0.0.1:9000/";
  auto local = S3Client::Create(o);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*local)->ObjectUrl("my-bucket", "a/b"), "http://127.0.0.1:9000/my-bucket/a/b");
}

TEST(S3Client, BadOptionsNameTheField) {
  S3Client::Options o;
  o.credentials = {.access_key_id = kKeyId, .secret_access_key = kSecret};
  o.endpoint_url = "ftp://x";
  EXPECT_THAT(std::string(S3Client::Create(o).status().message()), HasSubstr("endpoint_url"));
  o.endpoint_url = "http://x/path";
  EXPECT_THAT(std::string(S3Client::Create(o).status().message()), HasSubstr("no path"));
  o.endpoint_url = "";
  o.region = "EU WEST";
  EXPECT_THAT(std::string(S3Client::Create(o).status().message()), HasSubstr("region"));
  o.region = "eu-west-1";
  o.credentials.secret_access_key = "";
  EXPECT_EQ(S3Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseS3Uri, BucketAndPrefix) {
  auto a = ParseS3Uri("f", "s3://my-bucket/ckpt/job-1/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bucket, "my-bucket");
  EXPECT_EQ(a->prefix, "ckpt/job-1");
  auto b = ParseS3Uri("f", "s3://my-bucket");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefix, "");
  for (const char* bad : {"my-bucket/x", "s3://", "s3://A_B/x", "gs://b/x", "s3://ab/x"}) {
    auto s = ParseS3Uri("checkpoint_uri", bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.status().message()),
                HasSubstr(std::string("checkpoint_uri = \"") + bad + "\""));
  }
}

}  // namespace
}  // namespace spotdnn::launcher
