// `spotdnn catalog refresh --provider aws|gce|azure` against the fake EC2, Google Cloud and Azure
// endpoints, and `spotdnn local` launch/list/terminate with real processes in a temporary
// $SPOTDNN_HOME.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/cli.h"
#include "tests/launcher/fake_azure.h"
#include "tests/launcher/fake_ec2.h"
#include "tests/launcher/fake_gce.h"
#include "tests/launcher/test_keys.h"

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
  EXPECT_EQ(RunSpotdnn({"catalog", "refresh", "--provider", "nimbus"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--provider = \"nimbus\""));
  EXPECT_EQ(RunSpotdnn({"catalog", "refresh", "--provider", "gce"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--catalog is required for gce"));
  EXPECT_EQ(RunSpotdnn({"catalog", "refresh", "--provider", "azure", "--catalog", "aws-paper-2023"},
                       &out, &err),
            kExitBadInput);
  EXPECT_THAT(err, HasSubstr("is a aws catalog, not azure"));
  EXPECT_EQ(RunSpotdnn({"catalog", "refresh", "--provider", "aws", "--zone", "us-central1-a"}, &out,
                       &err),
            kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--zone: not a flag of --provider aws"));
  setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret-value", 1);
  int rc = RunSpotdnn({"catalog", "refresh", "--provider", "aws", "--endpoint-url", fake_.url()},
                      &out, &err);
  EXPECT_EQ(rc, kExitFailure);
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(err + out, Not(HasSubstr("a-wrong-secret-value")));
}

std::string WriteCatalog(const std::string& name, const std::string& provider,
                         const std::string& region, const std::vector<std::string>& types) {
  std::string items;
  for (const std::string& t : types) {
    absl::StrAppend(&items, items.empty() ? "" : ",", "{\"name\": \"", t,
                    "\", \"gpu_type\": \"V100\", \"gpus\": 1, \"gpu_memory_gib\": 16, "
                    "\"spot_price_per_hour\": 9.99, \"on_demand_price_per_hour\": 12, "
                    "\"quota\": 4}");
  }
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << "{\"name\": \"" << name << "\", \"provider\": \"" << provider
                      << "\", \"region\": \"" << region << "\", \"instance_types\": [" << items
                      << "], \"parameter_server\": {\"instance_type\": \"" << types[0]
                      << "\", \"bandwidth_mb_per_s\": 1000}, \"pcie_bandwidth_mb_per_s\": 10000}";
  return path;
}

nlohmann::json Sku(const std::string& description, const std::string& unit, int nanos) {
  return {
      {"description", description},
      {"category", {{"resourceFamily", "Compute"}, {"usageType", "Preemptible"}}},
      {"serviceRegions", {"us-central1"}},
      {"pricingInfo",
       {{{"pricingExpression",
          {{"usageUnit", unit},
           {"tieredRates",
            {{{"startUsageAmount", 0},
              {"unitPrice", {{"currencyCode", "USD"}, {"units", "0"}, {"nanos", nanos}}}}}}}}}}}};
}

TEST(CatalogRefreshGceTest, PricesFromTheBillingCatalog) {
  launcher::testing::FakeGce fake(
      {.public_key_pem = launcher::testing::kTestRsaKeyPem, .api_key = "AIzaCliKeyNeverShown"});
  fake.SetMachineType("n1-standard-8", 8, 30720);
  fake.AddSku(
      Sku("Spot Preemptible N1 Predefined Instance Core running in Americas", "h", 7000000));
  fake.AddSku(
      Sku("Spot Preemptible N1 Predefined Instance Ram running in Americas", "GiBy.h", 1000000));
  fake.AddSku(Sku("Spot Preemptible Nvidia Tesla V100 GPU running in Americas", "h", 740000000));
  const std::string key_file = ::testing::TempDir() + "/cli-gce-key.json";
  std::ofstream(key_file) << nlohmann::json{
      {"type", "service_account"},
      {"client_email", "launcher@spotdnn-test.iam.gserviceaccount.com"},
      {"private_key", launcher::testing::kTestRsaKeyPem},
      {"token_uri",
       fake.token_url()}}.dump();
  const std::string api_key_file = ::testing::TempDir() + "/cli-gce-api-key";
  std::ofstream(api_key_file) << "AIzaCliKeyNeverShown\n";
  const std::string catalog =
      WriteCatalog("gce-test", "gce", "us-central1",
                   {"n1-standard-8+nvidia-tesla-v100:1", "n1-standard-8+nvidia-tesla-t4:1"});
  const std::string out_path = ::testing::TempDir() + "/gce-refreshed.json";
  std::string out, err;
  int rc = RunSpotdnn({"catalog",
                       "refresh",
                       "--provider",
                       "gce",
                       "--catalog",
                       catalog,
                       "--project",
                       "spotdnn-test",
                       "--zone",
                       "us-central1-a",
                       "--credentials-file",
                       key_file,
                       "--api-key-file",
                       api_key_file,
                       "--endpoint-url",
                       fake.compute_url(),
                       "--billing-url",
                       fake.billing_url(),
                       "--out",
                       out_path,
                       "--json"},
                      &out, &err);
  ASSERT_EQ(rc, kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("\"missing\":[\"n1-standard-8+nvidia-tesla-t4:1\"]"));
  std::ifstream in(out_path);
  std::stringstream text;
  text << in.rdbuf();
  pb::InstanceCatalog refreshed;
  ASSERT_TRUE(services::ParseJson(text.str(), out_path, &refreshed).ok());
  EXPECT_NEAR(refreshed.instance_types(0).spot_price_per_hour(), 8 * 0.007 + 30 * 0.001 + 0.74,
              1e-9);
  EXPECT_DOUBLE_EQ(refreshed.instance_types(1).spot_price_per_hour(), 9.99);  // unchanged
  EXPECT_EQ(refreshed.region(), "us-central1");
  EXPECT_THAT(out + err, Not(HasSubstr("AIzaCliKeyNeverShown")));

  // Without an API key it says how to give one.
  unsetenv("GOOGLE_API_KEY");
  rc = RunSpotdnn({"catalog", "refresh", "--provider", "gce", "--catalog", catalog, "--project",
                   "spotdnn-test", "--zone", "us-central1-a", "--credentials-file", key_file},
                  &out, &err);
  EXPECT_EQ(rc, kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--api-key-file"));
  for (const std::string& p : {key_file, api_key_file, catalog, out_path}) std::remove(p.c_str());
}

TEST(CatalogRefreshAzureTest, PricesFromTheRetailPricesApi) {
  launcher::testing::FakeAzure fake({});
  auto price = [](const std::string& sku, const std::string& meter, double usd) {
    return nlohmann::json{
        {"currencyCode", "USD"},     {"retailPrice", usd},
        {"armRegionName", "eastus"}, {"effectiveStartDate", "2026-10-01T00:00:00Z"},
        {"meterName", meter},        {"productName", "Virtual Machines NCSv3 Series"},
        {"skuName", meter},          {"serviceName", "Virtual Machines"},
        {"unitOfMeasure", "1 Hour"}, {"type", "Consumption"},
        {"armSkuName", sku}};
  };
  fake.AddPrice(price("Standard_NC6s_v3", "NC6s v3", 3.06));
  fake.AddPrice(price("Standard_NC6s_v3", "NC6s v3 Spot", 0.3672));
  fake.AddPrice(price("Standard_NC12s_v3", "NC12s v3 Spot", 0.7344));
  fake.set_page_size(1);
  const std::string catalog =
      WriteCatalog("azure-test", "azure", "eastus", {"Standard_NC6s_v3", "Standard_NC12s_v3"});
  std::string out, err;
  int rc = RunSpotdnn({"catalog", "refresh", "--provider", "azure", "--catalog", catalog,
                       "--prices-url", fake.prices_url()},
                      &out, &err);
  ASSERT_EQ(rc, kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("Linux Spot, Azure Retail Prices"));
  EXPECT_THAT(out, HasSubstr("0.3672"));
  EXPECT_THAT(out, HasSubstr("0.7344"));
  std::remove(catalog.c_str());
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
  EXPECT_THAT(out, HasSubstr("Terminated 3 instances"));
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

// Launches one local worker running `sleep 60` in `home` (its own metadata emulator in-process)
// on a thread; returns its id and metadata endpoint once it runs.
struct LaunchedWorker {
  std::thread launcher;
  int rc = -1;
  std::string id, endpoint;
};

void LaunchOneWorker(const fs::path& home, const std::string& job, LaunchedWorker* w) {
  fs::remove_all(home);
  setenv("SPOTDNN_HOME", home.c_str(), 1);
  w->launcher = std::thread([w, job] {
    std::string out;
    w->rc = RunSpotdnn({"local", "launch", "--job", job, "--workers", "g4dn.4xlarge=1", "--ps", "0",
                        "--command", "sleep 60", "--timeout", "60s", "--json"},
                       &out);
  });
  for (int i = 0; i < 500 && w->id.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    std::string out;
    if (RunSpotdnn({"local", "list", "--job", job, "--json"}, &out) != kExitOk) continue;
    const nlohmann::json j = nlohmann::json::parse(out);
    for (const auto& instance : j["instances"]) {
      if (instance["state"] == "running" &&
          !instance["metadata_endpoint"].get<std::string>().empty()) {
        w->id = instance["id"];
        w->endpoint = instance["metadata_endpoint"];
      }
    }
  }
}

// `local revoke --notice 3s`: the notice on the instance's metadata endpoint takes effect 3 s
// after it is first there to read (it lost up to a second when its time was written in whole
// seconds).
TEST(LocalCommandTest, RevokeNoticeTakesEffectTheAskedTimeAfterItIsPublished) {
  const fs::path home = fs::path(::testing::TempDir()) / absl::StrCat("spotdnn-revoke-", getpid());
  LaunchedWorker w;
  LaunchOneWorker(home, "revoke-job", &w);
  ASSERT_FALSE(w.id.empty());
  // The endpoint: http://127.0.0.1:PORT/i/ID.
  const std::string base = w.endpoint.substr(0, w.endpoint.find("/i/"));
  const std::string prefix = w.endpoint.substr(base.size());
  httplib::Client client(base);
  auto token = client.Put(prefix + "/latest/api/token",
                          {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}}, "", "text/plain");
  ASSERT_TRUE(token && token->status == 200);
  // Revoke in the second half of a wall-clock second: a notice time cut to whole seconds would
  // then lose at least 0.5 s of the 3, whatever the timing, so the check below cannot pass by luck.
  while (absl::ToUnixMillis(absl::Now()) % 1000 < 500 ||
         absl::ToUnixMillis(absl::Now()) % 1000 > 700) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  int revoke_rc = -1;
  std::string revoke_out;
  std::thread revoker([&] {
    revoke_rc = RunSpotdnn({"local", "revoke", w.id, "--notice", "3s"}, &revoke_out);
  });
  absl::Time published = absl::InfinitePast();
  std::string body;
  for (int i = 0; i < 1000 && published == absl::InfinitePast(); ++i) {
    auto r = client.Get(prefix + "/latest/meta-data/spot/instance-action",
                        {{"X-aws-ec2-metadata-token", token->body}});
    if (r && r->status == 200) {
      published = absl::Now();
      body = r->body;
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  revoker.join();
  w.launcher.join();
  ASSERT_NE(published, absl::InfinitePast());
  EXPECT_EQ(revoke_rc, kExitOk);
  absl::Time effective;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full,
                              nlohmann::json::parse(body)["time"].get<std::string>(), &effective,
                              &error))
      << body;
  const double notice_s = absl::ToDoubleSeconds(effective - published);
  std::printf("local revoke --notice 3s: effective %.3f s after the notice was first read (%s)\n",
              notice_s, body.c_str());
  EXPECT_NEAR(notice_s, 3.0, 0.2) << body;
  fs::remove_all(home);
}

// `local clean` removes the kept logs and checkpoints once nothing runs, and refuses before.
TEST(LocalCommandTest, CleanRemovesKeptLogsAndCheckpoints) {
  const fs::path home = fs::path(::testing::TempDir()) / absl::StrCat("spotdnn-clean-", getpid());
  LaunchedWorker w;
  LaunchOneWorker(home, "clean-job", &w);
  ASSERT_FALSE(w.id.empty());
  fs::create_directories(home / "checkpoints" / "clean-job");
  std::ofstream(home / "checkpoints" / "clean-job" / "step-10.pt") << std::string(120 << 10, 'x');
  // A trace-driven job's trace time 0, kept for its resume, goes too.
  std::ofstream(launcher::CapacityTraceOriginPath((home / "local").string(), "clean-job"))
      << "1700000000000\n";
  std::string out, err;
  EXPECT_EQ(RunSpotdnn({"local", "clean"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr(w.id));
  EXPECT_THAT(err, HasSubstr("still running"));
  EXPECT_TRUE(fs::exists(home / "checkpoints" / "clean-job"));
  ASSERT_EQ(RunSpotdnn({"local", "terminate", "--all"}, &out), kExitOk);
  w.launcher.join();
  EXPECT_TRUE(fs::exists(home / "local" / "logs" / (w.id + ".log")));
  const uintmax_t log_bytes = fs::file_size(home / "local" / "logs" / (w.id + ".log"));
  ASSERT_EQ(RunSpotdnn({"local", "clean"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("Removed"));
  // What was removed, in a unit that fits it: "(120 KiB)", not "(0.1 MiB)".
  EXPECT_THAT(out, HasSubstr(absl::StrCat("(", base::FormatBytes((120 << 10) + log_bytes), ")")));
  EXPECT_THAT(out, ::testing::ContainsRegex("\\(1[0-9][0-9] KiB\\)")) << out;
  EXPECT_FALSE(fs::exists(home / "local" / "logs"));
  EXPECT_FALSE(fs::exists(home / "checkpoints"));
  EXPECT_FALSE(
      fs::exists(launcher::CapacityTraceOriginPath((home / "local").string(), "clean-job")));
  ASSERT_EQ(RunSpotdnn({"local", "clean"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("Nothing to clean"));
  fs::remove_all(home);
}

// A typo'd flag: the nearest flag as a hint, and one line of help, not the whole usage.
TEST(LocalCommandTest, ATypoSuggestsTheFlagWithoutAPageOfUsage) {
  std::string out, err;
  EXPECT_EQ(RunSpotdnn({"plan", "--worklaod", "resnet110"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("--worklaod: unknown flag; did you mean --workload?"));
  EXPECT_LE(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_EQ(RunSpotdnn({"local", "revoke", "i-x", "--notcie", "3s"}, &out, &err), kExitBadInput);
  EXPECT_THAT(err, HasSubstr("did you mean --notice?"));
}

}  // namespace
}  // namespace spotdnn::gateway
