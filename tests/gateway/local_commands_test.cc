// `spotdnn catalog refresh --provider aws` against the fake EC2 endpoint, and `spotdnn local`
// launch/list/terminate with real processes in a temporary $SPOTDNN_HOME.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/cli.h"
#include "tests/launcher/fake_ec2.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

int RunSpotdnn(const std::vector<std::string>& argv, std::string* out, std::string* err = nullptr) {
  std::ostringstream o, e;
  int rc = RunCli(argv, o, e);
  *out = o.str();
  if (err != nullptr) *err = e.str();
  return rc;
}

class CatalogRefreshTest : public ::testing::Test {
 protected:
  CatalogRefreshTest() : fake_("AKIDCLITEST", "cli/secret+key", "") {
    setenv("AWS_ACCESS_KEY_ID", "AKIDCLITEST", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "cli/secret+key", 1);
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    absl::Time t = absl::FromUnixSeconds(1763000000);
    fake_.AddSpotPrice({"g4dn.4xlarge", "us-east-1a", 0.4123, t});
    fake_.AddSpotPrice({"g4dn.4xlarge", "us-east-1d", 0.3811, t});
    fake_.AddSpotPrice({"p3.2xlarge", "us-east-1b", 0.9702, t});
    fake_.AddSpotPrice({"m5.xlarge", "us-east-1a", 0.0712, t});
    fake_.set_page_size(2);
  }
  launcher::testing::FakeEc2 fake_;
};

TEST_F(CatalogRefreshTest, WritesTheCheapestLivePrices) {
  std::string path = ::testing::TempDir() + "/spotdnn-refreshed-catalog.json";
  std::string out, err;
  int rc = RunSpotdnn({"catalog", "refresh", "--provider", "aws", "--catalog", "aws-paper-2023",
                       "--endpoint-url", fake_.url(), "--out", path, "--json"},
                      &out, &err);
  ASSERT_EQ(rc, kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("\"instance_type\":\"g4dn.4xlarge\""));
  EXPECT_THAT(out, HasSubstr("\"availability_zone\":\"us-east-1d\""));
  EXPECT_THAT(out, HasSubstr("\"missing\":[\"p2.8xlarge\""));

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  pb::InstanceCatalog catalog;
  ASSERT_TRUE(services::ParseJson(text.str(), path, &catalog).ok());
  for (const pb::InstanceType& t : catalog.instance_types()) {
    if (t.name() == "g4dn.4xlarge") {
      EXPECT_DOUBLE_EQ(t.spot_price_per_hour(), 0.3811);
    } else if (t.name() == "p3.2xlarge") {
      EXPECT_DOUBLE_EQ(t.spot_price_per_hour(), 0.9702);
    } else if (t.name() == "p2.8xlarge") {
      EXPECT_DOUBLE_EQ(t.spot_price_per_hour(), 2.16);  // no price read: unchanged
    }
  }
  EXPECT_DOUBLE_EQ(catalog.parameter_server().spot_price_per_hour(), 0.0712);
  EXPECT_NE(catalog.prices_as_of(), "2023-01");
  std::remove(path.c_str());
}

TEST_F(CatalogRefreshTest, ErrorsExitNonZeroWithoutSecrets) {
  std::string out, err;
  EXPECT_EQ(RunSpotdnn({"catalog", "refresh", "--provider", "gce"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--provider = \"gce\""));
  setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret-value", 1);
  int rc = RunSpotdnn({"catalog", "refresh", "--provider", "aws", "--endpoint-url", fake_.url()},
                      &out, &err);
  EXPECT_EQ(rc, kExitFailure);
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(err + out, Not(HasSubstr("a-wrong-secret-value")));
}

TEST(LocalCommandTest, LaunchListTerminate) {
  fs::path home = fs::path(::testing::TempDir()) / absl::StrCat("spotdnn-home-", getpid());
  fs::remove_all(home);
  setenv("SPOTDNN_HOME", home.c_str(), 1);
  int launch_rc = -1;
  std::string launch_out;
  std::thread launcher([&] {
    launch_rc = RunSpotdnn({"local", "launch", "--job", "cli-job", "--workers", "g4dn.4xlarge=2",
                            "--command", "sleep 60", "--timeout", "60s", "--json"},
                           &launch_out);
  });
  std::string out;
  bool all_running = false;
  for (int i = 0; i < 500 && !all_running; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    if (RunSpotdnn({"local", "list", "--job", "cli-job", "--json"}, &out) != kExitOk) continue;
    size_t running = 0;
    for (size_t pos = out.find("\"running\""); pos != std::string::npos;
         pos = out.find("\"running\"", pos + 1)) {
      ++running;
    }
    all_running = running == 3;  // 1 parameter server + 2 workers
  }
  EXPECT_TRUE(all_running) << out;
  EXPECT_THAT(out, HasSubstr("\"role\":\"ps\""));
  EXPECT_EQ(RunSpotdnn({"local", "terminate", "--job", "cli-job"}, &out), kExitOk);
  EXPECT_THAT(out, HasSubstr("Terminated 3 instance(s)"));
  launcher.join();  // the launcher sees nothing running and returns
  EXPECT_EQ(launch_rc, kExitOk);
  EXPECT_THAT(launch_out, HasSubstr("\"job_id\":\"cli-job\""));
  EXPECT_EQ(RunSpotdnn({"local", "list", "--json"}, &out), kExitOk);
  EXPECT_EQ(out, "{\"instances\":[]}\n");

  std::string err;
  EXPECT_EQ(RunSpotdnn({"local", "revoke", "i-local-nope"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("i-local-nope"));
  EXPECT_EQ(RunSpotdnn({"local", "launch", "--job", "x"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--command"));
  fs::remove_all(home);
}

}  // namespace
}  // namespace spotdnn::gateway
