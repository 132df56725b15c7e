// The launcher's one HTTP transport (http_retry.h) against a local cpp-httplib server on
// 127.0.0.1: Retry-After honoured, the cap respected, transient against final answers, transport
// failures, the 401 token refresh, and the signing decorator applied to every attempt. The
// providers' own fakes test their retry traits (throttling, capacity, partial launches) on top.
#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/http_retry.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;

// A server whose answers the test scripts: answer(n, request) for the n-th request (from 0).
class ScriptedServer {
 public:
  using Answer = std::function<void(int, const httplib::Request&, httplib::Response&)>;
  explicit ScriptedServer(Answer answer) : answer_(std::move(answer)) {
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      int n;
      {
        std::lock_guard<std::mutex> lock(mu_);
        n = static_cast<int>(requests_.size());
        requests_.push_back(req);
      }
      answer_(n, req, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_, "/v1/thing?x=1"); }
  std::vector<httplib::Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  Answer answer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<httplib::Request> requests_;
};

// Traits: 2xx accepted, 503 and 429 transient, anything else final.
std::optional<HttpFailure> Traits(const HttpResponse& answer) {
  if (answer.status >= 200 && answer.status < 300) return std::nullopt;
  const std::string text = absl::StrCat("HTTP ", answer.status, " ", answer.body);
  if (answer.status == 503 || answer.status == 429) {
    return HttpFailure{.status = absl::UnavailableError(text), .retryable = true};
  }
  if (answer.status == 401) return HttpFailure{.status = absl::UnauthenticatedError(text)};
  return HttpFailure{.status = absl::InvalidArgumentError(text)};
}

class TransportTest : public ::testing::Test {
 protected:
  // Full jitter drawn at the top of the range, waits recorded.
  base::BackoffPolicy Policy(int attempts, absl::Duration initial = absl::Milliseconds(100),
                             absl::Duration cap = absl::Seconds(1)) {
    return base::BackoffPolicy({.max_attempts = attempts,
                                .initial = initial,
                                .max = cap,
                                .sleep = [this](absl::Duration d) { sleeps_.push_back(d); },
                                .random = [] { return 0.999999; }});
  }
  std::vector<absl::Duration> sleeps_;
};

TEST_F(TransportTest, RetryAfterIsHonoured) {
  ScriptedServer server([](int n, const httplib::Request&, httplib::Response& res) {
    if (n == 0) {
      res.status = 429;
      res.set_header("Retry-After", "3");
    } else {
      res.status = 200;
      res.set_content("ok", "text/plain");
    }
  });
  const base::BackoffPolicy policy = Policy(3, absl::Milliseconds(100), absl::Seconds(20));
  absl::StatusOr<HttpResponse> got =
      SendWithRetries({.url = server.url()}, "thing", policy, nullptr, Traits);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->body, "ok");
  ASSERT_EQ(sleeps_.size(), 1u);
  EXPECT_EQ(sleeps_[0], absl::Seconds(3));  // the hint, not the 100 ms backoff
}

TEST_F(TransportTest, BackoffIsCappedAndAttemptsRunOut) {
  ScriptedServer server([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content("busy", "text/plain");
  });
  const base::BackoffPolicy policy = Policy(6, absl::Milliseconds(100), absl::Milliseconds(300));
  absl::StatusOr<HttpResponse> got =
      SendWithRetries({.url = server.url()}, "GET thing", policy, nullptr, Traits);
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("GET thing: gave up after 6 attempts"));
  EXPECT_THAT(got.status().message(), HasSubstr("HTTP 503 busy"));
  EXPECT_EQ(server.requests().size(), 6u);
  ASSERT_EQ(sleeps_.size(), 5u);
  for (absl::Duration d : sleeps_) EXPECT_LE(d, absl::Milliseconds(300));
  EXPECT_GT(sleeps_[0], absl::Milliseconds(99));   // ~100 ms
  EXPECT_GT(sleeps_[1], absl::Milliseconds(199));  // ~200 ms
  EXPECT_GT(sleeps_[4], absl::Milliseconds(299));  // at the cap
}

TEST_F(TransportTest, RetryAfterBeyondTwiceTheCapIsLimited) {
  ScriptedServer server([](int n, const httplib::Request&, httplib::Response& res) {
    res.status = n == 0 ? 503 : 200;
    if (n == 0) res.set_header("Retry-After", "86400");
  });
  const base::BackoffPolicy policy = Policy(2, absl::Milliseconds(100), absl::Seconds(1));
  ASSERT_TRUE(SendWithRetries({.url = server.url()}, "t", policy, nullptr, Traits).ok());
  EXPECT_EQ(sleeps_, std::vector<absl::Duration>{absl::Seconds(2)});
}

TEST_F(TransportTest, FinalAnswersAreNotRetried) {
  ScriptedServer server([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 400;
    res.set_content("bad field", "text/plain");
  });
  const base::BackoffPolicy policy = Policy(5);
  absl::StatusOr<HttpResponse> got =
      SendWithRetries({.url = server.url()}, "t", policy, nullptr, Traits);
  EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("HTTP 400 bad field"));
  EXPECT_EQ(server.requests().size(), 1u);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(TransportTest, TransportFailuresAreTransient) {
  std::string url;
  {
    ScriptedServer gone([](int, const httplib::Request&, httplib::Response&) {});
    url = gone.url();
  }  // nothing listens there any more
  const base::BackoffPolicy policy = Policy(3);
  absl::StatusOr<HttpResponse> got = SendWithRetries({.url = url}, "t", policy, nullptr, Traits);
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("gave up after 3 attempts"));
  EXPECT_THAT(got.status().message(), Not(HasSubstr("x=1")));  // no query in messages
  EXPECT_EQ(sleeps_.size(), 2u);
}

// Hands out "token-1", "token-2", ...: a fresh one after each Invalidate.
class CountingTokens final : public TokenSource {
 public:
  absl::StatusOr<std::string> Token() override {
    ++fetches;
    return absl::StrCat("token-", generation);
  }
  void Invalidate() override { ++generation; }
  std::string Describe() const override { return "the test's tokens"; }
  int fetches = 0;
  int generation = 1;
};

TEST_F(TransportTest, A401RefreshesTheTokenOnceAtOnce) {
  ScriptedServer server([](int, const httplib::Request& req, httplib::Response& res) {
    res.status = req.get_header_value("Authorization") == "Bearer token-2" ? 200 : 401;
  });
  CountingTokens tokens;
  BearerTokenSigner signer(&tokens);
  const base::BackoffPolicy policy = Policy(3);
  absl::StatusOr<HttpResponse> got =
      SendWithRetries({.url = server.url()}, "t", policy, &signer, Traits);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(tokens.generation, 2);
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_TRUE(sleeps_.empty());  // a refresh is not a backoff
}

TEST_F(TransportTest, A401AfterTheRefreshIsUnauthenticated) {
  ScriptedServer server([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 401;
    res.set_content("expired", "text/plain");
  });
  CountingTokens tokens;
  BearerTokenSigner signer(&tokens);
  const base::BackoffPolicy policy = Policy(5);
  absl::StatusOr<HttpResponse> got =
      SendWithRetries({.url = server.url()}, "t", policy, &signer, Traits);
  EXPECT_TRUE(absl::IsUnauthenticated(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("a fresh token from the test's tokens"));
  EXPECT_EQ(server.requests().size(), 2u);
}

// Signs with a header that counts the attempts.
class CountingSigner final : public RequestSigner {
 public:
  absl::Status Sign(HttpRequest& request) override {
    request.headers.emplace_back("X-Attempt", absl::StrCat(++signed_));
    return absl::OkStatus();
  }
  int signed_ = 0;
};

TEST_F(TransportTest, TheSignerSignsEveryAttempt) {
  ScriptedServer server([](int n, const httplib::Request&, httplib::Response& res) {
    res.status = n < 2 ? 503 : 200;
  });
  CountingSigner signer;
  const base::BackoffPolicy policy = Policy(4);
  ASSERT_TRUE(SendWithRetries({.url = server.url()}, "t", policy, &signer, Traits).ok());
  std::vector<httplib::Request> requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    // Each attempt carries its own signature only (not the earlier attempts' as well).
    EXPECT_EQ(requests[i].get_header_value_count("X-Attempt"), 1u);
    EXPECT_EQ(requests[i].get_header_value("X-Attempt"), absl::StrCat(i + 1));
  }
}

absl::Time TickingClock() {
  static std::atomic<int> ticks{0};
  return absl::FromUnixSeconds(1700000000 + ticks++);
}

TEST_F(TransportTest, SigV4IsFreshOnEveryAttempt) {
  ScriptedServer server([](int n, const httplib::Request&, httplib::Response& res) {
    res.status = n == 0 ? 503 : 200;
  });
  SigV4Signer signer({.access_key_id = "AKIDEXAMPLE", .secret_access_key = "secret"},
                     {.region = "us-east-1", .service = "ec2"}, &TickingClock);
  const base::BackoffPolicy policy = Policy(3);
  ASSERT_TRUE(SendWithRetries({.url = server.url()}, "t", policy, &signer, Traits).ok());
  std::vector<httplib::Request> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  for (const httplib::Request& r : requests) {
    EXPECT_THAT(r.get_header_value("Authorization"),
                HasSubstr("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
    EXPECT_THAT(r.get_header_value("Host"), HasSubstr("127.0.0.1:"));
  }
  EXPECT_NE(requests[0].get_header_value("X-Amz-Date"), requests[1].get_header_value("X-Amz-Date"));
  EXPECT_NE(requests[0].get_header_value("Authorization"),
            requests[1].get_header_value("Authorization"));
}

TEST(RetryAfterTest, SecondsAndHttpDates) {
  HttpResponse response;
  EXPECT_EQ(RetryAfter(response), absl::ZeroDuration());
  response.headers["retry-after"] = "7";
  EXPECT_EQ(RetryAfter(response), absl::Seconds(7));
  response.headers["retry-after"] = "Wed, 21 Oct 2015 07:28:30 GMT";
  const absl::Time now =
      absl::FromCivil(absl::CivilSecond(2015, 10, 21, 7, 28, 0), absl::UTCTimeZone());
  EXPECT_EQ(RetryAfter(response, now), absl::Seconds(30));
  EXPECT_EQ(RetryAfter(response, now + absl::Minutes(1)), absl::ZeroDuration());  // past
  response.headers["retry-after"] = "soon";
  EXPECT_EQ(RetryAfter(response), absl::ZeroDuration());
}

TEST(ValidateCloudRetryTest, NeedsAnAttempt) {
  EXPECT_TRUE(ValidateCloudRetry({}).ok());
  EXPECT_THAT(ValidateCloudRetry({.max_attempts = 0}).message(),
              HasSubstr("retry.max_attempts = 0"));
}

}  // namespace
}  // namespace spotdnn::launcher
