// The real binaries with TLS, mutual TLS and a bearer token on 127.0.0.1: spotdnn-predictor and
// the spotdnn CLI (in-process and the executable), spotdnn-agent to spotdnn-detector, and the
// exit status 2 for a bad certificate file.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "services/common/security.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/child_process.h"
#include "tests/testing/test_certificates.h"

namespace spotdnn::services {
namespace {

using ::spotdnn::testing_util::Child;
using ::spotdnn::testing_util::ReadPort;
using ::testing::AllOf;
using ::testing::HasSubstr;

class SecureBinariesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("secure_binaries_test_" + std::to_string(getpid()));
    certs_ = testing::MakeTestCertificates(dir_);
    token_file_ = Path("token");
    std::ofstream(token_file_) << "binary-token\n";
    wrong_token_file_ = Path("wrong-token");
    std::ofstream(wrong_token_file_) << "not-the-token\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Bin(const std::string& name) {
    return std::string(SPOTDNN_BINARY_DIR) + "/" + name;
  }
  // The server flags of mutual TLS with a token.
  std::vector<std::string> ServerFlags() const {
    return {"--tls_cert=" + certs_.server_cert, "--tls_key=" + certs_.server_key,
            "--tls_client_ca=" + certs_.ca_cert, "--auth_token_file=" + token_file_};
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::filesystem::path dir_;
  testing::TestCertificates certs_;
  std::string token_file_, wrong_token_file_;
};

TEST_F(SecureBinariesTest, PredictorServesTheCliOverMutualTlsWithToken) {
  std::vector<std::string> argv = {Bin("spotdnn-predictor"), "--listen=127.0.0.1:0",
                                   "--port_file=" + Path("port")};
  for (const std::string& flag : ServerFlags()) argv.push_back(flag);
  Child predictor(argv);
  const int port = ReadPort(Path("port"));
  ASSERT_GT(port, 0);
  const std::string server = "127.0.0.1:" + std::to_string(port);

  // The security options go anywhere in argv.
  auto run = gateway::Cli({"catalogs", "--tls-ca", certs_.ca_cert, "--server", server, "--tls-cert",
                           certs_.client_cert, "--tls-key=" + certs_.client_key, "--token-file",
                           token_file_});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("aws-paper-2023"));

  run = gateway::Cli(
      {"catalogs", "--server", server, "--tls-ca", certs_.ca_cert, "--token-file", token_file_});
  EXPECT_EQ(run.code, 1) << "no client certificate: " << run.out;
  run = gateway::Cli({"catalogs", "--server", server, "--tls-ca", certs_.ca_cert, "--tls-cert",
                      certs_.rogue_client_cert, "--tls-key", certs_.rogue_client_key,
                      "--token-file", token_file_});
  EXPECT_EQ(run.code, 1) << "rogue client certificate: " << run.out;
  run = gateway::Cli({"catalogs", "--server", server, "--tls-ca", certs_.ca_cert, "--tls-cert",
                      certs_.client_cert, "--tls-key", certs_.client_key});
  EXPECT_EQ(run.code, 1) << run.out;
  EXPECT_THAT(run.err, HasSubstr("UNAUTHENTICATED"));
  run = gateway::Cli({"catalogs", "--server", server, "--tls-ca", certs_.ca_cert, "--tls-cert",
                      certs_.client_cert, "--tls-key", certs_.client_key, "--token-file",
                      wrong_token_file_});
  EXPECT_THAT(run.err, HasSubstr("UNAUTHENTICATED"));
  run = gateway::Cli({"catalogs", "--server", server});
  EXPECT_EQ(run.code, 1) << "plaintext: " << run.out;
  run = gateway::Cli({"catalogs", "--server", server, "--tls-ca", Path("missing.pem")});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, AllOf(HasSubstr("--tls-ca"), HasSubstr(Path("missing.pem"))));

  // The executable, configured by the environment alone.
  const std::string command = "SPOTDNN_TLS_CA='" + certs_.ca_cert + "' SPOTDNN_TLS_CERT='" +
                              certs_.client_cert + "' SPOTDNN_TLS_KEY='" + certs_.client_key +
                              "' SPOTDNN_TOKEN_FILE='" + token_file_ + "' '" + Bin("spotdnn") +
                              "' workloads --json --server " + server + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_THAT(output, HasSubstr("resnet110"));

  EXPECT_TRUE(predictor.Stop());
}

TEST_F(SecureBinariesTest, BadCertificateFilesExitWithStatus2) {
  Child predictor({Bin("spotdnn-predictor"), "--listen=127.0.0.1:0",
                   "--tls_cert=" + Path("missing.pem"), "--tls_key=" + certs_.server_key},
                  Path("predictor.err"));
  EXPECT_EQ(predictor.Wait(), 2);
  EXPECT_THAT(Slurp(Path("predictor.err")),
              AllOf(HasSubstr("--tls_cert"), HasSubstr(Path("missing.pem"))));

  Child agent({Bin("spotdnn-agent"), "--detector=127.0.0.1:1", "--instance_id=i", "--cloud=aws",
               "--tls_ca=" + certs_.ca_cert, "--tls_cert=" + certs_.client_cert,
               "--tls_key=" + Path("missing.key")},
              Path("agent.err"));
  EXPECT_EQ(agent.Wait(), 2);
  EXPECT_THAT(Slurp(Path("agent.err")),
              AllOf(HasSubstr("--tls_key"), HasSubstr(Path("missing.key"))));
}

TEST_F(SecureBinariesTest, AgentReachesDetectorOverMutualTlsWithToken) {
  Child emulator({Bin("spotdnn-metadata-emulator"), "--port_file=" + Path("emu"), "--threads=16"});
  const int emulator_port = ReadPort(Path("emu"));
  ASSERT_GT(emulator_port, 0);
  std::vector<std::string> argv = {Bin("spotdnn-detector"),      "--listen=127.0.0.1:0",
                                   "--port_file=" + Path("det"), "--db=" + Path("d.db"),
                                   "--heartbeat_interval=200ms", "--poll_interval=100ms"};
  for (const std::string& flag : ServerFlags()) argv.push_back(flag);
  Child detector(argv);
  const int detector_port = ReadPort(Path("det"));
  ASSERT_GT(detector_port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(detector_port);
  Child agent({Bin("spotdnn-agent"), "--detector=" + target, "--instance_id=i-tls", "--job_id=j",
               "--cloud=azure",
               "--metadata_endpoint=http://127.0.0.1:" + std::to_string(emulator_port) + "/i/i-tls",
               "--heartbeat_interval=100ms", "--poll_interval=100ms", "--tls_ca=" + certs_.ca_cert,
               "--tls_cert=" + certs_.client_cert, "--tls_key=" + certs_.client_key,
               "--auth_token_file=" + token_file_});
  {
    httplib::Client control("127.0.0.1", emulator_port);
    auto scheduled =
        control.Post("/emulator/notice?instance=i-tls&cloud=azure&in_ms=300", "", "text/plain");
    ASSERT_TRUE(scheduled);
    ASSERT_EQ(scheduled->status, 200);
  }

  auto channel = MakeChannel(target, {.ca_file = certs_.ca_cert,
                                      .cert_file = certs_.client_cert,
                                      .key_file = certs_.client_key,
                                      .token_file = token_file_});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::Detector::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  auto reader = stub->WatchEvents(&context, v1::WatchEventsRequest());
  v1::RevocationEvent event;
  ASSERT_TRUE(reader->Read(&event)) << reader->Finish().error_message();
  EXPECT_EQ(event.instance_id(), "i-tls");
  EXPECT_EQ(event.kind(), v1::RevocationEvent::KIND_NOTICE);
  context.TryCancel();
  reader->Finish();

  EXPECT_TRUE(agent.Stop());
  EXPECT_TRUE(detector.Stop());
  EXPECT_TRUE(emulator.Stop());
}

// A worker reports its steps to a profiler that wants mutual TLS and a token: spotdnn-sim-worker
// (the stand-in for a training process) takes the agent's client flags. Without them it gets
// nothing through.
TEST_F(SecureBinariesTest, SimWorkerReportsToAProfilerOverMutualTlsWithToken) {
  std::vector<std::string> argv = {Bin("spotdnn-profiler"), "--listen=127.0.0.1:0",
                                   "--port_file=" + Path("prof"), "--db=" + Path("p.db")};
  for (const std::string& flag : ServerFlags()) argv.push_back(flag);
  Child profiler(argv);
  const int port = ReadPort(Path("prof"));
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  setenv("SPOTDNN_JOB_ID", "tls-job", 1);
  auto worker = [&](const std::string& id, bool secured) {
    setenv("SPOTDNN_INSTANCE_ID", id.c_str(), 1);
    std::vector<std::string> args = {Bin("spotdnn-sim-worker"), "--profiler=" + target,
                                     "--iteration_time_s=0.01", "--max_steps=20",
                                     "--report_interval=50ms"};
    if (secured) {
      for (const std::string& flag :
           {"--tls_ca=" + certs_.ca_cert, "--tls_cert=" + certs_.client_cert,
            "--tls_key=" + certs_.client_key, "--auth_token_file=" + token_file_}) {
        args.push_back(flag);
      }
    }
    Child child(args, Path(id + ".log"));
    return child.Wait(std::chrono::seconds(30));
  };
  std::optional<int> plain = worker("i-plain", false);
  std::optional<int> secured = worker("i-tls", true);
  unsetenv("SPOTDNN_JOB_ID");
  unsetenv("SPOTDNN_INSTANCE_ID");
  ASSERT_TRUE(secured.has_value());
  EXPECT_EQ(*secured, 0) << Slurp(Path("i-tls.log"));
  EXPECT_TRUE(plain.has_value());

  auto channel = MakeChannel(target, {.ca_file = certs_.ca_cert,
                                      .cert_file = certs_.client_cert,
                                      .key_file = certs_.client_key,
                                      .token_file = token_file_});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::Profiler::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetJobProgressRequest request;
  request.set_job_id("tls-job");
  v1::GetJobProgressResponse progress;
  grpc::Status status = stub->GetJobProgress(&context, request, &progress);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(progress.workers_size(), 1) << "only the worker with the client flags gets through";
  EXPECT_EQ(progress.workers(0).worker_id(), "i-tls");
  EXPECT_EQ(progress.total_steps(), 20);
  EXPECT_TRUE(profiler.Stop());
}

}  // namespace
}  // namespace spotdnn::services
