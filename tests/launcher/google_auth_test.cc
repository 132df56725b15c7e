// Google credentials: RS256 against RFC 7515's example and a token the openssl command line
// signed, the service account key file, the token cache's refresh before expiry, and the key
// file and metadata server flows against the fake Google token endpoint.
#include "provisioner/launcher/google_auth.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/launcher/fake_gce.h"
#include "tests/launcher/test_keys.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;
using testing::kTestAssertion;
using testing::kTestRsaKeyPem;
using ::testing::Not;

// RFC 7515 appendix A.2: the RSA key as a JWK (its private parts).
constexpr char kJwkN[] =
    "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4"
    "QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdb"
    "BYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-D"
    "WNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ";
constexpr char kJwkE[] = "AQAB";
constexpr char kJwkD[] =
    "Eq5xpGnNCivDflJsRQBXHx1hdR1k6Ulwe2JZD50LpXyWPEAeP88vLNO97IjlA7_GQ5sLKMgvfTeXZx9SE-7YwVol2NXOoA"
    "Je46sui395IW_GO-pWJ1O0BkTGoVEn2bKVRUCgu-GjBVaYLU6f3l9kJfFNS3E0QbVdxzubSu3Mkqzjkn439X0M_V51gfpR"
    "LI9JYanrC4D4qAdGcopV_0ZHHzQlBjudU2QvXt4ehNYTCBr6XCLQUShb1juUO1ZdiYoFaFQT5Tw8bGUl_x_jTj3ccPDVZF"
    "D9pIuhLhBOneufuBiB4cS98l2SR_RQyGWSeWjnczT0QU91p1DhOVRuOopznQ";
constexpr char kJwkP[] =
    "4BzEEOtIpmVdVEZNCqS7baC4crd0pqnRH_5IB3jw3bcxGn6QLvnEtfdUdiYrqBdss1l58BQ3KhooKeQTa9AB0Hw_Py5PJd"
    "TJNPY8cQn7ouZ2KKDcmnPGBY5t7yLc1QlQ5xHdwW1VhvKn-nXqhJTBgIPgtldC-KDV5z-y2XDwGUc";
constexpr char kJwkQ[] =
    "uQPEfgmVtjL0Uyyx88GZFF1fOunH3-7cepKmtH4pxhtCoHqpWmT8YAmZxaewHgHAjLYsp1ZSe7zFYHj7C6ul7TjeLQeZD_"
    "YwD66t62wDmpe_HlB-TnBA-njbglfIsRLtXlnDzQkv5dTltRJ11BKBBypeeF6689rjcJIDEz9RWdc";
constexpr char kJwkDp[] =
    "BwKfV3Akq5_MFZDFZCnW-wzl-CCo83WoZvnLQwCTeDv8uzluRSnm71I3QCLdhrqE2e9YkxvuxdBfpT_PI7Yz-FOKnu1R6H"
    "sJeDCjn12Sk3vmAktV2zb34MCdy7cpdTh_YVr7tss2u6vneTwrA86rZtu5Mbr1C1XsmvkxHQAdYo0";
constexpr char kJwkDq[] =
    "h_96-mK1R_7glhsum81dZxjTnYynPbZpHziZjeeHcXYsXaaMwkOlODsWa7I9xXDoRwbKgB719rrmI2oKr6N3Do9U0ajaHF"
    "-NKJnwgjMd2w9cjz3_-kyNlxAr2v4IKhGNpmM5iIgOS1VZnOZ68m6_pbLBSp3nssTdlqvd0tIiTHU";
constexpr char kJwkQi[] =
    "IYd7DHOhrWvxkwPQsRM2tOgrjbcrfvtQJipd-DlcxyVuuM9sQLdgjVk2oy26F0EmpScGLq2MowX7fhd_QJQ3ydy5cY7YIB"
    "i87w93IKLEdfnbJtoOPLUW0ITrJReOgo1cq9SbsxYawBgfp_gh6A5603k2-ZQwVK0JKSHuLFkuQ3U";
// The JWS the RFC gives for header {"alg":"RS256"} and the JWT of its appendix A.1.
constexpr char kRfcJws[] =
    "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNv"
    "bS9pc19yb290Ijp0cnVlfQ.cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm"
    "4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6x"
    "BArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ"
    "1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw";

// The RFC's JWK as a PEM private key (through OpenSSL's RSA key import).
std::string RfcKeyPem() {
  auto bn = [](const char* b64url) {
    std::string bytes = *Base64UrlDecode(b64url);
    return BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes.data()),
                     static_cast<int>(bytes.size()), nullptr);
  };
  BIGNUM* parts[] = {bn(kJwkN), bn(kJwkE),  bn(kJwkD),  bn(kJwkP),
                     bn(kJwkQ), bn(kJwkDp), bn(kJwkDq), bn(kJwkQi)};
  const char* names[] = {OSSL_PKEY_PARAM_RSA_N,         OSSL_PKEY_PARAM_RSA_E,
                         OSSL_PKEY_PARAM_RSA_D,         OSSL_PKEY_PARAM_RSA_FACTOR1,
                         OSSL_PKEY_PARAM_RSA_FACTOR2,   OSSL_PKEY_PARAM_RSA_EXPONENT1,
                         OSSL_PKEY_PARAM_RSA_EXPONENT2, OSSL_PKEY_PARAM_RSA_COEFFICIENT1};
  OSSL_PARAM_BLD* build = OSSL_PARAM_BLD_new();
  for (int i = 0; i < 8; ++i) OSSL_PARAM_BLD_push_BN(build, names[i], parts[i]);
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(build);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr);
  EVP_PKEY* key = nullptr;
  EVP_PKEY_fromdata_init(ctx);
  EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_KEYPAIR, params);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, size);
  BIO_free(bio);
  EVP_PKEY_free(key);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(build);
  for (BIGNUM* b : parts) BN_free(b);
  return pem;
}

// Another RSA key, for "the wrong key" cases.
std::string FreshKeyPem() {
  EVP_PKEY* key = EVP_RSA_gen(2048);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, size);
  BIO_free(bio);
  EVP_PKEY_free(key);
  return pem;
}

std::string KeyFileJson(const std::string& pem, const std::string& token_uri) {
  return nlohmann::json{{"type", "service_account"},
                        {"project_id", "spotdnn-test"},
                        {"private_key_id", "0123456789abcdef0123456789abcdef01234567"},
                        {"private_key", pem},
                        {"client_email", "launcher@spotdnn-test.iam.gserviceaccount.com"},
                        {"client_id", "1234567890"},
                        {"token_uri", token_uri}}
      .dump();
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Base64UrlTest, KnownValuesAndRoundTrip) {
  EXPECT_EQ(Base64UrlEncode(""), "");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");
  EXPECT_EQ(Base64UrlEncode("fo"), "Zm8");
  EXPECT_EQ(Base64UrlEncode("foo"), "Zm9v");
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");  // '+' and '/' in standard base64
  EXPECT_EQ(*Base64UrlDecode("-_8"), "\xfb\xff");
  EXPECT_EQ(*Base64UrlDecode("Zm8="), "fo");
  EXPECT_EQ(Base64UrlDecode("Zm9v!").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Base64UrlDecode("Z").status().code(), absl::StatusCode::kInvalidArgument);
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(*Base64UrlDecode(Base64UrlEncode(all)), all);
}

TEST(Rs256Test, SignsRfc7515AppendixA2Exactly) {
  const std::string pem = RfcKeyPem();
  ASSERT_THAT(pem, HasSubstr("BEGIN PRIVATE KEY"));
  const std::string payload =
      "{\"iss\":\"joe\",\r\n \"exp\":1300819380,\r\n \"http://example.com/is_root\":true}";
  absl::StatusOr<std::string> jws = SignJwsRs256("{\"alg\":\"RS256\"}", payload, pem);
  ASSERT_TRUE(jws.ok()) << jws.status();
  EXPECT_EQ(*jws, kRfcJws);

  const size_t dot = std::string(kRfcJws).rfind('.');
  const std::string input = std::string(kRfcJws).substr(0, dot);
  const std::string signature = *Base64UrlDecode(std::string(kRfcJws).substr(dot + 1));
  EXPECT_TRUE(VerifyRs256(input, signature, pem));
  EXPECT_FALSE(VerifyRs256(input + "x", signature, pem));
  EXPECT_FALSE(VerifyRs256(input, signature, kTestRsaKeyPem));
}

TEST(Rs256Test, ServiceAccountAssertionMatchesOpensslCommandLine) {
  ServiceAccountKey key{.client_email = "launcher@spotdnn-test.iam.gserviceaccount.com",
                        .private_key_id = "0123456789abcdef0123456789abcdef01234567",
                        .private_key = kTestRsaKeyPem,
                        .token_uri = "https://oauth2.googleapis.com/token"};
  absl::StatusOr<std::string> assertion =
      ServiceAccountAssertion(key, kGoogleCloudPlatformScope, absl::FromUnixSeconds(1700000000));
  ASSERT_TRUE(assertion.ok()) << assertion.status();
  EXPECT_EQ(*assertion, kTestAssertion);
}

TEST(Rs256Test, UnreadableKeysAreRefusedWithoutQuotingThem) {
  absl::StatusOr<std::string> signed_bad = SignRs256("data", "-----BEGIN PRIVATE KEY-----\nAAAA");
  EXPECT_EQ(signed_bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(signed_bad.status().message(), Not(HasSubstr("AAAA")));
  EXPECT_FALSE(VerifyRs256("data", "sig", "not a key"));
}

TEST(ServiceAccountKeyTest, ParsesAndNamesWhatIsWrong) {
  absl::StatusOr<ServiceAccountKey> key =
      ParseServiceAccountKey(KeyFileJson(kTestRsaKeyPem, "https://oauth2.googleapis.com/token"));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->client_email, "launcher@spotdnn-test.iam.gserviceaccount.com");
  EXPECT_EQ(key->project_id, "spotdnn-test");

  nlohmann::json doc =
      nlohmann::json::parse(KeyFileJson(kTestRsaKeyPem, "https://oauth2.googleapis.com/token"));
  doc["type"] = "authorized_user";
  absl::Status s = ParseServiceAccountKey(doc.dump()).status();
  EXPECT_THAT(s.message(), HasSubstr("type = \"authorized_user\""));
  doc["type"] = "service_account";
  doc.erase("client_email");
  EXPECT_THAT(ParseServiceAccountKey(doc.dump()).status().message(), HasSubstr("client_email"));
  doc["client_email"] = "a@b";
  doc["private_key"] = "-----BEGIN PRIVATE KEY-----\nsecretbits\n-----END PRIVATE KEY-----\n";
  s = ParseServiceAccountKey(doc.dump()).status();
  EXPECT_THAT(s.message(), HasSubstr("private_key is not a PEM private key"));
  EXPECT_THAT(s.message(), Not(HasSubstr("secretbits")));
  EXPECT_EQ(ReadServiceAccountKey("/nonexistent/key.json").status().code(),
            absl::StatusCode::kNotFound);
}

// A clock the tests move.
absl::Time g_now = absl::FromUnixSeconds(1700000000);
absl::Time TestNow() { return g_now; }

TEST(TokenCacheTest, RefreshesBeforeExpiryAndAfterARefusal) {
  g_now = absl::FromUnixSeconds(1700000000);
  int n = 0;
  absl::Duration lifetime = absl::Hours(1);
  CachedTokenSource source(
      "test",
      [&]() -> absl::StatusOr<AccessToken> {
        ++n;
        return AccessToken{.token = "t" + std::to_string(n), .expires_at = g_now + lifetime};
      },
      absl::Minutes(5), &TestNow);
  EXPECT_EQ(*source.Token(), "t1");
  g_now += absl::Minutes(54);
  EXPECT_EQ(*source.Token(), "t1");  // 6 minutes left: still good
  g_now += absl::Minutes(1) + absl::Seconds(1);
  EXPECT_EQ(*source.Token(), "t2");  // under 5 minutes left: refreshed before it expires
  EXPECT_EQ(source.fetches(), 2);
  source.Invalidate();
  EXPECT_EQ(*source.Token(), "t3");  // a refused token is not used again

  // A short-lived token is refreshed at half its life.
  lifetime = absl::Seconds(60);
  source.Invalidate();
  EXPECT_EQ(*source.Token(), "t4");
  g_now += absl::Seconds(29);
  EXPECT_EQ(*source.Token(), "t4");
  g_now += absl::Seconds(2);
  EXPECT_EQ(*source.Token(), "t5");
}

TEST(TokenCacheTest, FetchErrorsPassThroughAndAreRetriedNextTime) {
  bool fail = true;
  CachedTokenSource source("test", [&]() -> absl::StatusOr<AccessToken> {
    if (fail) return absl::UnavailableError("token endpoint down");
    return AccessToken{.token = "ok", .expires_at = absl::Now() + absl::Hours(1)};
  });
  EXPECT_EQ(source.Token().status().code(), absl::StatusCode::kUnavailable);
  fail = false;
  EXPECT_EQ(*source.Token(), "ok");
}

TEST(TokenResponseTest, ParsesNumbersAndStrings) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  auto token = ParseTokenResponse(R"({"access_token":"abc","expires_in":3599})", now, "x");
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(token->expires_at, now + absl::Seconds(3599));
  token = ParseTokenResponse(R"({"access_token":"abc","expires_in":"3599"})", now, "x");
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(token->expires_at, now + absl::Seconds(3599));
  EXPECT_EQ(ParseTokenResponse(R"({"expires_in":1})", now, "x").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ParseTokenResponse("<html>", now, "x").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(GoogleTokenSourceTest, KeyFileAgainstTheTokenEndpoint) {
  testing::FakeGce fake({.public_key_pem = kTestRsaKeyPem});
  const std::string path = WriteFile("gce-key.json", KeyFileJson(kTestRsaKeyPem, fake.token_url()));
  auto env = [](const std::string&) { return std::string(); };
  auto source = GoogleTokenSource({.key_file = path, .getenv = env});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(),
              HasSubstr("service account launcher@spotdnn-test.iam.gserviceaccount.com"));
  absl::StatusOr<std::string> token = (*source)->Token();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(*token, HasSubstr("ya29.fake-"));
  EXPECT_EQ(*(*source)->Token(), *token);  // cached
  EXPECT_EQ(fake.tokens_issued(), 1);
  EXPECT_TRUE(fake.refused_assertions().empty());

  // GOOGLE_APPLICATION_CREDENTIALS names the same file.
  auto from_env = GoogleTokenSource({.getenv = [&](const std::string& name) {
    return name == "GOOGLE_APPLICATION_CREDENTIALS" ? path : std::string();
  }});
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_TRUE((*from_env)->Token().ok());
  std::remove(path.c_str());
}

TEST(GoogleTokenSourceTest, AnotherKeyIsRefusedAndNothingSecretLeaks) {
  testing::FakeGce fake({.public_key_pem = kTestRsaKeyPem});
  const std::string wrong = FreshKeyPem();
  absl::StatusOr<ServiceAccountKey> key =
      ParseServiceAccountKey(KeyFileJson(wrong, fake.token_url()));
  ASSERT_TRUE(key.ok());
  auto source = ServiceAccountTokenSource(*key, kGoogleCloudPlatformScope, absl::Seconds(5));
  absl::Status s = source->Token().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("Invalid JWT Signature"));
  EXPECT_THAT(s.message(), Not(HasSubstr("PRIVATE KEY")));
  EXPECT_THAT(s.message(), Not(HasSubstr("eyJ")));  // no assertion
  ASSERT_EQ(fake.refused_assertions().size(), 1u);
  EXPECT_EQ(fake.tokens_issued(), 0);
}

TEST(GoogleTokenSourceTest, MetadataServerOnAVm) {
  testing::FakeGce fake({});
  auto env = [](const std::string&) { return std::string(); };
  auto source = GoogleTokenSource({.getenv = env, .metadata_url = fake.url()});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("the VM's service account launcher@"));
  absl::StatusOr<std::string> token = (*source)->Token();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(*token, HasSubstr("ya29.metadata-"));

  // GCE_METADATA_HOST points at it too (host:port, as Google's libraries read it).
  auto by_env = GoogleTokenSource({.getenv = [&](const std::string& name) {
    return name == "GCE_METADATA_HOST" ? fake.url().substr(7) : std::string();
  }});
  ASSERT_TRUE(by_env.ok()) << by_env.status();
}

TEST(GoogleTokenSourceTest, NoCredentialsListsWhatWasTried) {
  auto env = [](const std::string&) { return std::string(); };
  // Port 9 on loopback: nothing listens (discard), the probe fails at once.
  auto source = GoogleTokenSource({.getenv = env,
                                   .metadata_url = "http://127.0.0.1:9",
                                   .metadata_probe_timeout = absl::Milliseconds(500)});
  EXPECT_EQ(source.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(source.status().message(), HasSubstr("GOOGLE_APPLICATION_CREDENTIALS is not set"));
  EXPECT_THAT(source.status().message(), HasSubstr("the metadata server http://127.0.0.1:9"));
  auto missing = GoogleTokenSource({.key_file = "/nonexistent/key.json", .getenv = env});
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/key.json"));
}

}  // namespace
}  // namespace spotdnn::launcher
