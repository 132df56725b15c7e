// Transport security: the listen rule, file errors, TLS and mutual TLS with certificates made
// here, and bearer tokens over TLS and over loopback plaintext. Servers bind 127.0.0.1:0 only.
#include "services/common/security.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/gateway/cli/security_options.h"
#include "services/predictor/predictor_service.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "tests/testing/test_certificates.h"

namespace spotdnn::services {
namespace {

namespace pb = ::spotdnn::v1;
using ::testing::AllOf;
using ::testing::HasSubstr;

// One directory of certificates and tokens for the whole suite.
class SecurityFiles {
 public:
  static const SecurityFiles& Get() {
    static const SecurityFiles* files = new SecurityFiles();
    return *files;
  }
  std::filesystem::path dir;
  testing::TestCertificates certs;
  std::string token_file, empty_file, missing_file;

 private:
  SecurityFiles()
      : dir(std::filesystem::temp_directory_path() / ("security_test_" + std::to_string(getpid()))),
        certs(testing::MakeTestCertificates(dir)) {
    token_file = (dir / "token").string();
    std::ofstream(token_file) << "s3cret-token\n";
    empty_file = (dir / "empty").string();
    std::ofstream(empty_file).flush();
    missing_file = (dir / "no-such-file.pem").string();
  }
};

TEST(ListenSecurity, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:50051", "127.3.2.1:0", "localhost:1", "LOCALHOST:1", "[::1]:0",
                        "dns:///localhost:5", "ipv4:127.0.0.1:5", "unix:/tmp/s.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", ":50051", "[::]:50051", "10.0.0.5:1", "128.0.0.1:1",
                        "example.com:443", "[::ffff:10.0.0.1]:1", "dns:///10.1.1.1:5"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(ListenSecurity, RefusesPlaintextOffLoopback) {
  for (const char* listen : {"0.0.0.0:50051", "10.0.0.5:50051", "[::]:0"}) {
    const absl::Status s = CheckListenSecurity(listen, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("--listen"), HasSubstr(listen),
                                                HasSubstr("--insecure"), HasSubstr("--tls_cert")));
  }
}

TEST(ListenSecurity, AcceptsLoopbackTlsOrInsecure) {
  EXPECT_TRUE(CheckListenSecurity("127.0.0.1:0", {}).ok());
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:50051", {.insecure = true}).ok());
  EXPECT_TRUE(
      CheckListenSecurity("0.0.0.0:50051", {.tls_cert_file = "c.pem", .tls_key_file = "k.pem"})
          .ok());
}

TEST(ServerSecurityFiles, ErrorsNameTheFlagAndPath) {
  const SecurityFiles& f = SecurityFiles::Get();
  auto expect_error = [](const ServerSecurity& security, const std::string& flag,
                         const std::string& path) {
    auto made = MakeServerCredentials("127.0.0.1:0", security);
    ASSERT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(std::string(made.status().message()), AllOf(HasSubstr(flag), HasSubstr(path)));
  };
  expect_error({.tls_cert_file = f.missing_file, .tls_key_file = f.certs.server_key}, "--tls_cert",
               f.missing_file);
  expect_error({.tls_cert_file = f.certs.server_cert, .tls_key_file = f.empty_file}, "--tls_key",
               f.empty_file);
  // A certificate where the key belongs.
  expect_error({.tls_cert_file = f.certs.server_cert, .tls_key_file = f.certs.server_cert},
               "--tls_key", f.certs.server_cert);
  expect_error({.tls_cert_file = f.certs.server_cert,
                .tls_key_file = f.certs.server_key,
                .tls_client_ca_file = f.missing_file},
               "--tls_client_ca", f.missing_file);
  expect_error({.auth_token_file = f.empty_file}, "--auth_token_file", f.empty_file);
  expect_error({.auth_token_file = f.dir.string()}, "--auth_token_file", f.dir.string());
  expect_error({.tls_client_ca_file = f.certs.ca_cert}, "--tls_client_ca", f.certs.ca_cert);

  auto half = MakeServerCredentials("127.0.0.1:0", {.tls_cert_file = f.certs.server_cert});
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("--tls_key is missing"));
  // A token in clear over a network protects nothing: refused even with --insecure.
  auto clear =
      MakeServerCredentials("0.0.0.0:0", {.auth_token_file = f.token_file, .insecure = true});
  EXPECT_THAT(std::string(clear.status().message()),
              AllOf(HasSubstr("--auth_token_file"), HasSubstr("0.0.0.0:0")));
}

TEST(ClientSecurityFiles, ErrorsNameTheFlagAndPath) {
  const SecurityFiles& f = SecurityFiles::Get();
  auto channel = MakeChannel("127.0.0.1:1", ClientSecurity{.ca_file = f.missing_file});
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(channel.status().message()),
              AllOf(HasSubstr("--tls_ca"), HasSubstr(f.missing_file)));
  channel =
      MakeChannel("127.0.0.1:1", {.ca_file = f.certs.ca_cert, .cert_file = f.certs.client_cert});
  EXPECT_THAT(std::string(channel.status().message()), HasSubstr("--tls_key is missing"));
  const absl::Status s = SetDefaultClientSecurity({.token_file = f.missing_file});
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("--auth_token_file"), HasSubstr(f.missing_file)));
}

// A predictor service on 127.0.0.1:0 secured as a test says, and calls to it.
class SecureServerTest : public ::testing::Test {
 protected:
  const SecurityFiles& f = SecurityFiles::Get();

  void Start(const ServerSecurity& security) {
    service_ = std::make_unique<PredictorServiceImpl>(
        std::make_shared<DataRegistry>(DataRegistry::WithBuiltins()));
    auto started = StartServer("127.0.0.1:0", {service_.get()}, security);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    target_ = "127.0.0.1:" + std::to_string(started->port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // ListCatalogs over a channel made with `security`.
  grpc::Status Call(const ClientSecurity& security) {
    auto channel = MakeChannel(target_, security);
    if (!channel.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "bad client security");
    return CallOn(*channel);
  }
  grpc::Status CallOn(const std::shared_ptr<grpc::Channel>& channel) {
    auto stub = pb::Predictor::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::ListCatalogsResponse response;
    grpc::Status status = stub->ListCatalogs(&context, pb::ListCatalogsRequest(), &response);
    if (status.ok() && response.catalogs().empty()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "no catalogs");
    }
    return status;
  }
  // The gRPC health service's Check, as a probe sends it.
  grpc::Status HealthCheck(const ClientSecurity& security) {
    auto channel = MakeChannel(target_, security);
    if (!channel.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "bad client security");
    grpc::GenericStub stub(*channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;  // an empty HealthCheckRequest: the server
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                   &response, [&](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    return status;
  }

  ServerSecurity MutualTls() const {
    return {.tls_cert_file = f.certs.server_cert,
            .tls_key_file = f.certs.server_key,
            .tls_client_ca_file = f.certs.ca_cert};
  }
  ClientSecurity Client() const {
    return {.ca_file = f.certs.ca_cert,
            .cert_file = f.certs.client_cert,
            .key_file = f.certs.client_key};
  }

  std::unique_ptr<PredictorServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
};

TEST_F(SecureServerTest, MutualTlsSucceeds) {
  Start(MutualTls());
  const grpc::Status s = Call(Client());
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The verified name may also be given explicitly.
  ClientSecurity named = Client();
  named.server_name_override = "localhost";
  EXPECT_TRUE(Call(named).ok());
}

TEST_F(SecureServerTest, ClientWithoutCertificateIsRefused) {
  Start(MutualTls());
  const grpc::Status s = Call({.ca_file = f.certs.ca_cert});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(SecureServerTest, RogueClientCertificateIsRefused) {
  Start(MutualTls());
  const grpc::Status s = Call({.ca_file = f.certs.ca_cert,
                               .cert_file = f.certs.rogue_client_cert,
                               .key_file = f.certs.rogue_client_key});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(SecureServerTest, PlaintextClientIsRefused) {
  Start(MutualTls());
  const grpc::Status s = Call({});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(SecureServerTest, ClientRefusesServerItDoesNotTrust) {
  Start({.tls_cert_file = f.certs.server_cert, .tls_key_file = f.certs.server_key});
  EXPECT_TRUE(Call({.ca_file = f.certs.ca_cert}).ok());  // server-only TLS
  const grpc::Status s = Call({.ca_file = f.certs.rogue_ca_cert});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(SecureServerTest, TokenOverMutualTls) {
  ServerSecurity security = MutualTls();
  security.auth_token_file = f.token_file;
  Start(security);
  ClientSecurity client = Client();
  grpc::Status s = Call(client);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("authorization"));
  client.token = "s3cret-tokeN";
  s = Call(client);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  client.token = "s3cret-token-and-more";
  EXPECT_EQ(Call(client).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  client.token = "";
  client.token_file = f.token_file;
  s = Call(client);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Probes need no token.
  EXPECT_TRUE(HealthCheck(Client()).ok());
}

TEST_F(SecureServerTest, TokenOverLoopbackPlaintext) {
  Start({.auth_token_file = f.token_file});
  grpc::Status s = Call({});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Call({.token = "wrong"});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Call({.token_file = f.token_file});
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(HealthCheck({}).ok());
}

TEST_F(SecureServerTest, DefaultClientSecurityIsWhatMakeChannelUses) {
  ServerSecurity security = MutualTls();
  security.auth_token_file = f.token_file;
  Start(security);
  EXPECT_FALSE(CallOn(MakeChannel(target_)).ok());
  ClientSecurity client = Client();
  client.token_file = f.token_file;
  ASSERT_TRUE(SetDefaultClientSecurity(client).ok());
  const grpc::Status s = CallOn(MakeChannel(target_));
  // A bad file leaves the default as it was.
  EXPECT_FALSE(SetDefaultClientSecurity({.ca_file = f.missing_file}).ok());
  const grpc::Status again = CallOn(MakeChannel(target_));
  ASSERT_TRUE(SetDefaultClientSecurity({}).ok());
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_FALSE(CallOn(MakeChannel(target_)).ok());
}

TEST(CliSecurityOptions, TakenAnywhereInArgv) {
  std::vector<std::string> argv = {"catalogs",    "--tls-ca",         "ca.pem", "--server",
                                   "127.0.0.1:1", "--tls-cert=c.pem", "--json", "--token-file",
                                   "t",           "--tls-key",        "k.pem"};
  auto security = gateway::TakeSecurityOptions(argv);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(argv, (std::vector<std::string>{"catalogs", "--server", "127.0.0.1:1", "--json"}));
  EXPECT_EQ(security->ca_file, "ca.pem");
  EXPECT_EQ(security->cert_file, "c.pem");
  EXPECT_EQ(security->key_file, "k.pem");
  EXPECT_EQ(security->token_file, "t");
  EXPECT_EQ(security->names.cert, "--tls-cert");
}

TEST(CliSecurityOptions, EnvironmentDefaultsAndErrors) {
  setenv("SPOTDNN_TLS_CA", "env-ca.pem", 1);
  setenv("SPOTDNN_TOKEN_FILE", "env-token", 1);
  std::vector<std::string> argv = {"catalogs", "--tls-ca", "flag-ca.pem"};
  auto security = gateway::TakeSecurityOptions(argv);
  unsetenv("SPOTDNN_TLS_CA");
  unsetenv("SPOTDNN_TOKEN_FILE");
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->ca_file, "flag-ca.pem");  // the option wins
  EXPECT_EQ(security->token_file, "env-token");

  argv = {"catalogs", "--tls-ca"};
  EXPECT_THAT(std::string(gateway::TakeSecurityOptions(argv).status().message()),
              HasSubstr("--tls-ca needs a FILE"));
  argv = {"catalogs", "--tls-ca=a", "--tls-ca", "b"};
  EXPECT_THAT(std::string(gateway::TakeSecurityOptions(argv).status().message()),
              HasSubstr("--tls-ca given twice"));
  argv = {"catalogs", "--tls-ca", SecurityFiles::Get().missing_file};
  const absl::Status s = gateway::ApplySecurityOptions(argv);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("--tls-ca"), HasSubstr(SecurityFiles::Get().missing_file)));
}

// ---- The bearer-token check on one call's metadata ----

class BearerTokenCheckTest : public ::testing::Test {
 protected:
  grpc::Status Check(std::vector<std::pair<std::string, std::string>> headers) {
    storage_ = std::move(headers);
    std::multimap<grpc::string_ref, grpc::string_ref> metadata;
    for (const auto& [name, value] : storage_) metadata.emplace(name, value);
    return CheckBearerToken(metadata, "RIGHT");
  }
  std::vector<std::pair<std::string, std::string>> storage_;
};

TEST_F(BearerTokenCheckTest, OneHeaderWithTheTokenPasses) {
  EXPECT_TRUE(
      Check({{":path", "/spotdnn.v1.Predictor/Predict"}, {"authorization", "Bearer RIGHT"}}).ok());
}

TEST_F(BearerTokenCheckTest, TwoHeadersInAnyCaseAreRefused) {
  // The probe's case: the wrong token under an upper-case name, the right one in lower case.
  for (const std::string& upper : {"Authorization", "AUTHORIZATION", "aUtHoRiZaTiOn"}) {
    for (const std::string& first : {"Bearer WRONG", "Bearer RIGHT"}) {
      const grpc::Status s = Check({{upper, first}, {"authorization", "Bearer RIGHT"}});
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << upper << ": " << first;
      EXPECT_THAT(s.error_message(), HasSubstr("2 \"authorization\" headers")) << upper;
    }
  }
}

TEST_F(BearerTokenCheckTest, AWrongOrMissingTokenIsRefusedWhateverTheNamesCase) {
  EXPECT_EQ(Check({{"Authorization", "Bearer WRONG"}}).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Check({{"x-other", "Bearer RIGHT"}}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Check({}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // One header, spelled with capitals, holding the right token: one header, so it passes.
  EXPECT_TRUE(Check({{"Authorization", "Bearer RIGHT"}}).ok());
}

TEST_F(BearerTokenCheckTest, HealthCallsNeedNoToken) {
  EXPECT_TRUE(Check({{":path", "/grpc.health.v1.Health/Check"}}).ok());
}

}  // namespace
}  // namespace spotdnn::services
