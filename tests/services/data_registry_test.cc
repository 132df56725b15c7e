#include "services/common/data_registry.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "predictor/performance_model.h"
#include "services/common/convert.h"
#include "services/common/embedded_file.h"
#include "spotdnn/v1/profiler.pb.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;

TEST(Builtins, EveryEmbeddedFileParses) {
  for (const EmbeddedFile& f : BuiltinCatalogFiles()) {
    pb::InstanceCatalog c;
    EXPECT_TRUE(ParseJson(f.content, f.name, &c).ok()) << f.name;
    EXPECT_EQ(c.name(), f.name) << "a built-in catalog's name matches its file name";
    EXPECT_TRUE(ToDomain(c).Validate().ok()) << ToDomain(c).Validate();
  }
  for (const EmbeddedFile& f : BuiltinWorkloadFiles()) {
    pb::WorkloadProfile w;
    EXPECT_TRUE(ParseJson(f.content, f.name, &w).ok()) << f.name;
    EXPECT_EQ(w.name(), f.name);
    EXPECT_TRUE(ToDomain(w).Validate().ok()) << ToDomain(w).Validate();
  }
  const DataRegistry registry = DataRegistry::WithBuiltins();
  EXPECT_EQ(registry.catalogs().size(), 4u);   // with gce-icac-2019 and local-cpu
  EXPECT_EQ(registry.workloads().size(), 6u);  // with resnet32-cifar10-gce
}

TEST(Builtins, PaperCatalogIsTableIII) {
  auto c = DataRegistry::WithBuiltins().ResolveCatalog("aws-paper-2023");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->instance_types_size(), 7);
  EXPECT_EQ(c->instance_types(0).name(), "p3.2xlarge");
  EXPECT_EQ(c->instance_types(0).spot_price_per_hour(), 1.25);
  EXPECT_EQ(c->instance_types(1).gpus(), 8);
  EXPECT_EQ(c->instance_types(6).on_demand_price_per_hour(), 1.14);
  for (const auto& t : c->instance_types()) EXPECT_EQ(t.quota(), 10);
  EXPECT_EQ(c->parameter_server().bandwidth_mb_per_s(), 1200);
  EXPECT_EQ(c->pcie_bandwidth_mb_per_s(), 10000);
}

TEST(Builtins, ResNet110OnPrototypeCatalogGivesWorkedExample) {
  const DataRegistry registry = DataRegistry::WithBuiltins();
  auto model = predictor::PerformanceModel::Create(
      ToDomain(*registry.ResolveWorkload("resnet110")),
      ToDomain(*registry.ResolveCatalog("aws-spotdnn-prototype")));
  ASSERT_TRUE(model.ok()) << model.status();
  const predictor::Estimate e = model->Evaluate(std::vector<int>{2, 1, 3, 0, 0}, 0.9);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.normalized_iterations, 13225);
  EXPECT_NEAR(e.cost_usd, 2.119135, 1e-6);
}

TEST(Builtins, TableIVProfilesSayWhatTheyLack) {
  const DataRegistry registry = DataRegistry::WithBuiltins();
  auto vgg = registry.ResolveWorkload("vgg19");
  ASSERT_TRUE(vgg.ok());
  EXPECT_EQ(vgg->parameter_size_mb(), 574);
  EXPECT_EQ(vgg->required_bandwidth_mb_per_s(), 620);
  auto model = predictor::PerformanceModel::Create(
      ToDomain(*vgg), ToDomain(*registry.ResolveCatalog("aws-paper-2023")));
  EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(model.status().message(), HasSubstr("no loss model"));
}

TEST(Resolve, UnknownNamesListTheKnownOnes) {
  auto c = DataRegistry::WithBuiltins().ResolveCatalog("gcp-2024");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("aws-paper-2023"));
}

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spotdnn-registry-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(FileTest, ReadsAUsersCatalogFile) {
  const std::string path = Write("mine.json", R"({"instance_types": [{"name": "x", "gpus": 1}],
      "parameter_server": {"bandwidth_mb_per_s": 100}, "pcie_bandwidth_mb_per_s": 1000})");
  auto c = DataRegistry::WithBuiltins().ResolveCatalog(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name(), "mine") << "a nameless file takes its file name";
  EXPECT_EQ(c->instance_types(0).name(), "x");
}

TEST_F(FileTest, BadJsonNamesTheFileAndTheProblem) {
  const std::string path = Write("bad.json", R"({"instance_types": [{"name": "x", "gpuz": 1}]})");
  auto c = DataRegistry::WithBuiltins().ResolveCatalog(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("bad.json"));
  EXPECT_THAT(c.status().message(), HasSubstr("gpuz"));
  auto missing = DataRegistry::WithBuiltins().ResolveWorkload((dir_ / "nope.json").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.json"));
}

TEST_F(FileTest, AddsADirectoryOfWorkloads) {
  Write("a.json", R"({"name": "alpha", "parameter_size_mb": 1, "required_bandwidth_mb_per_s": 2})");
  Write("b.json", R"({"parameter_size_mb": 3, "required_bandwidth_mb_per_s": 4})");
  Write("notes.txt", "ignored");
  DataRegistry registry = DataRegistry::WithBuiltins();
  ASSERT_TRUE(registry.AddWorkloadDir(dir_.string()).ok());
  EXPECT_TRUE(registry.ResolveWorkload("alpha").ok());
  EXPECT_TRUE(registry.ResolveWorkload("b").ok());
  EXPECT_EQ(registry.workloads().size(), 8u);
  EXPECT_EQ(registry.AddCatalogDir((dir_ / "missing").string()).code(),
            absl::StatusCode::kNotFound);
}

// A profile's JSON says how it trains in the words a person writes: "sync": "allreduce" or "ps",
// "global_batch": "fixed" or "scale"; the proto names are read too, and anything else is refused
// naming the field, the value and what is accepted.
TEST(ProfileJson, ReadsAndWritesTheShortNamesOfSyncAndGlobalBatch) {
  pb::WorkloadProfile w;
  ASSERT_TRUE(
      ParseJson(R"({"name":"w","sync":"allreduce","global_batch":"scale"})", "W.json", &w).ok());
  EXPECT_EQ(w.sync(), pb::SYNC_KIND_ALLREDUCE);
  EXPECT_EQ(w.global_batch(), pb::GLOBAL_BATCH_SCALE);
  ASSERT_TRUE(ParseJson(R"({"sync":"ps","globalBatch":"fixed"})", "W.json", &w).ok());
  EXPECT_EQ(w.sync(), pb::SYNC_KIND_PS);
  EXPECT_EQ(w.global_batch(), pb::GLOBAL_BATCH_FIXED);
  ASSERT_TRUE(ParseJson(R"({"sync":"SYNC_KIND_ALLREDUCE","global_batch":"GLOBAL_BATCH_SCALE"})",
                        "W.json", &w)
                  .ok());
  EXPECT_EQ(w.sync(), pb::SYNC_KIND_ALLREDUCE);
  EXPECT_EQ(w.global_batch(), pb::GLOBAL_BATCH_SCALE);

  // Written short, and the defaults left out.
  w.set_name("w");
  const std::string json = ToJson(w);
  EXPECT_THAT(json, HasSubstr(R"("sync":"allreduce")"));
  EXPECT_THAT(json, HasSubstr(R"("global_batch":"scale")"));
  pb::WorkloadProfile back;
  ASSERT_TRUE(ParseJson(ToJson(w, /*pretty=*/true), "back.json", &back).ok());
  EXPECT_EQ(back.SerializeAsString(), w.SerializeAsString());
  pb::WorkloadProfile ps;
  EXPECT_THAT(ToJson(ps), ::testing::Not(HasSubstr("sync")));
  EXPECT_THAT(ToJson(ps), ::testing::Not(HasSubstr(R"("global_batch":)")));
  ps.set_sync(pb::SYNC_KIND_PS);
  EXPECT_THAT(ToJson(ps), HasSubstr(R"("sync":"ps")"));

  // Inside another message too (a list of profiles).
  pb::ListProfilesResponse list;
  *list.add_profiles() = w;
  EXPECT_THAT(ToJson(list), HasSubstr(R"("sync":"allreduce")"));
  pb::ListProfilesResponse list_back;
  ASSERT_TRUE(ParseJson(ToJson(list), "list.json", &list_back).ok());
  EXPECT_EQ(list_back.profiles(0).sync(), pb::SYNC_KIND_ALLREDUCE);

  const absl::Status ring = ParseJson(R"({"name":"w","sync":"ring"})", "W.json", &w);
  EXPECT_EQ(ring.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ring.message(),
              HasSubstr(R"(W.json: sync = "ring": not a known value; accepted: ps, allreduce)"));
  const absl::Status grow = ParseJson(R"({"global_batch":"grow"})", "W.json", &w);
  EXPECT_THAT(grow.message(), HasSubstr(R"(global_batch = "grow")"));
  EXPECT_THAT(grow.message(), HasSubstr("accepted: fixed, scale"));
  const absl::Status nested =
      ParseJson(R"({"profiles":[{"name":"a"},{"sync":"ring"}]})", "list.json", &list);
  EXPECT_THAT(nested.message(), HasSubstr(R"(profiles[1].sync = "ring")"));
}

}  // namespace
}  // namespace spotdnn::services
