// Plan on a catalog that lists zones, through the provisioner service over 127.0.0.1:0: the plan
// goes to the cheapest place that may take it, says where, and moves when told a place has no
// capacity or is to be avoided.
#include "services/provisioner/zone_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/request_check.h"
#include "services/common/server.h"
#include "services/provisioner/provisioner_service.h"
#include "tests/testing/sync_workload.h"

namespace spotdnn::services {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The prototype catalog without zones.
pb::InstanceCatalog Prototype() {
  auto catalog = DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  for (pb::InstanceType& t : *catalog->mutable_instance_types()) t.clear_zones();
  return *catalog;
}

// The prototype catalog's five types in us-east-1a and us-east-1b at their own prices, and in
// us-west-2a with g3.8xlarge and g4dn.4xlarge cheaper there (`west_discount` off their price).
pb::InstanceCatalog ZonedPrototype(double west_discount) {
  auto catalog = DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  pb::InstanceCatalog c = *catalog;
  for (pb::InstanceType& t : *c.mutable_instance_types()) {
    t.clear_zones();
    t.add_zones()->set_name("us-east-1a");
    t.add_zones()->set_name("us-east-1b");
    pb::InstanceZone* west = t.add_zones();
    west->set_name("us-west-2a");
    west->set_region("us-west-2");
    if (t.name() == "g3.8xlarge" || t.name() == "g4dn.4xlarge") {
      west->set_spot_price_per_hour(t.spot_price_per_hour() * (1 - west_discount));
    }
  }
  return c;
}

class ZonePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<ProvisionerServiceImpl>(
        std::make_shared<DataRegistry>(DataRegistry::WithBuiltins()));
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = pb::Provisioner::NewStub(MakeChannel("127.0.0.1:" + std::to_string(started->port)));
  }
  void TearDown() override { server_->Shutdown(); }

  // ResNet-110 (parameter server) to loss 0.9 in 30 minutes on `catalog`.
  static pb::PlanRequest Request(const pb::InstanceCatalog& catalog) {
    pb::PlanRequest r;
    r.mutable_workload()->set_name("resnet110");
    *r.mutable_catalog()->mutable_catalog() = catalog;
    r.mutable_slo()->set_target_loss(0.9);
    r.mutable_slo()->set_deadline_s(1800);
    return r;
  }

  grpc::Status Plan(const pb::PlanRequest& r, pb::PlanResponse* out) {
    grpc::ClientContext context;
    return stub_->Plan(&context, r, out);
  }

  // The plan of `r` on the prototype catalog without zones.
  pb::Plan Unzoned(pb::PlanRequest r) {
    *r.mutable_catalog()->mutable_catalog() = Prototype();
    pb::PlanResponse response;
    const grpc::Status s = Plan(r, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.plan().feasible()) << response.plan().reason();
    EXPECT_EQ(response.plan().zone(), "");
    EXPECT_EQ(response.plan().zones_considered_size(), 0);
    return response.plan();
  }

  std::unique_ptr<ProvisionerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Provisioner::Stub> stub_;
};

TEST_F(ZonePlanTest, ZonesOfEqualPriceGiveTheSamePlanInTheFirstListedRegion) {
  const pb::PlanRequest r = Request(ZonedPrototype(0));
  const pb::Plan unzoned = Unzoned(r);
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  const pb::Plan& p = response.plan();
  ASSERT_TRUE(p.feasible()) << p.reason();
  EXPECT_EQ(p.cluster().SerializeAsString(), unzoned.cluster().SerializeAsString());
  EXPECT_EQ(p.cost_usd(), unzoned.cost_usd());
  EXPECT_EQ(p.time_s(), unzoned.time_s());
  EXPECT_EQ(p.region(), "us-east-1");
  EXPECT_EQ(p.zone(), "");  // a parameter-server job: each type in its zone of the region
  EXPECT_THAT(p.zones(), ElementsAre("p2.xlarge=us-east-1a", "g4dn.4xlarge=us-east-1a",
                                     "g3.8xlarge=us-east-1a"));
  ASSERT_EQ(p.zones_considered_size(), 2);
  EXPECT_THAT(p.zones_considered(0), StartsWith("us-east-1: $2.1191 in "));
  EXPECT_THAT(p.zones_considered(1), StartsWith("us-west-2: $2.1191 in "));
}

TEST_F(ZonePlanTest, APlanGoesToTheCheaperRegionAndMovesWhenItHasNoCapacity) {
  pb::PlanRequest r = Request(ZonedPrototype(0.3));
  const pb::Plan unzoned = Unzoned(r);
  r.mutable_options()->set_include_baselines(true);
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  const pb::Plan& west = response.plan();
  ASSERT_TRUE(west.feasible()) << west.reason();
  EXPECT_EQ(west.region(), "us-west-2");
  EXPECT_LT(west.cost_usd(), unzoned.cost_usd() - 0.1);
  for (const std::string& z : west.zones()) EXPECT_THAT(z, HasSubstr("=us-west-2a"));
  EXPECT_THAT(west.zones_considered(0), StartsWith("us-west-2: $"));
  EXPECT_THAT(west.zones_considered(1), StartsWith("us-east-1: $2.1191"));
  // The baselines were planned in the same place.
  EXPECT_EQ(response.homogeneous_baseline().region(), "us-west-2");

  // No spot capacity in us-west-2a now: back to us-east-1, at its prices.
  r.mutable_options()->add_zones_without_capacity("us-west-2a");
  pb::PlanResponse moved;
  ASSERT_TRUE(Plan(r, &moved).ok());
  EXPECT_EQ(moved.plan().region(), "us-east-1");
  EXPECT_NEAR(moved.plan().cost_usd(), unzoned.cost_usd(), 1e-9);
  EXPECT_THAT(moved.plan().zones_considered(),
              ElementsAre(StartsWith("us-east-1: $2.1191"), "us-west-2a: no spot capacity now"));

  // Pinned to us-east-1b: every type there.
  r.mutable_options()->clear_zones_without_capacity();
  r.mutable_options()->set_zone("us-east-1b");
  pb::PlanResponse pinned;
  ASSERT_TRUE(Plan(r, &pinned).ok());
  EXPECT_EQ(pinned.plan().zone(), "us-east-1b");
  EXPECT_THAT(pinned.plan().zones(), ElementsAre("p2.xlarge=us-east-1b", "g4dn.4xlarge=us-east-1b",
                                                 "g3.8xlarge=us-east-1b"));
}

TEST_F(ZonePlanTest, ASynchronousPlanRunsInOneZoneTheCheapest) {
  pb::PlanRequest r = Request(ZonedPrototype(0.3));
  *r.mutable_workload()->mutable_profile() = testing_util::SynchronousResnet("resnet110-sync");
  r.mutable_slo()->clear_target_loss();
  r.mutable_slo()->set_target_iterations(20000);
  r.mutable_slo()->set_deadline_s(3600);
  const pb::Plan unzoned = Unzoned(r);
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  const pb::Plan& p = response.plan();
  ASSERT_TRUE(p.feasible()) << p.reason();
  EXPECT_EQ(p.zone(), "us-west-2a");
  EXPECT_EQ(p.region(), "us-west-2");
  EXPECT_LT(p.cost_usd(), unzoned.cost_usd());
  ASSERT_GT(p.zones_size(), 0);
  for (const std::string& z : p.zones()) EXPECT_THAT(z, HasSubstr("=us-west-2a"));
  ASSERT_EQ(p.zones_considered_size(), 3);
  EXPECT_THAT(p.zones_considered(0), StartsWith("us-west-2a: $"));
  // Avoiding it: the first listed of the two zones at the catalog's prices.
  r.mutable_options()->add_avoid_zones("us-west-2a");
  pb::PlanResponse avoided;
  ASSERT_TRUE(Plan(r, &avoided).ok());
  EXPECT_EQ(avoided.plan().zone(), "us-east-1a");
  EXPECT_EQ(avoided.plan().cost_usd(), unzoned.cost_usd());
  EXPECT_EQ(avoided.plan().zones_considered(2), "us-west-2a: avoided");
}

TEST_F(ZonePlanTest, ZoneErrorsNameTheFieldAndTheZone) {
  pb::PlanRequest r = Request(ZonedPrototype(0));
  r.mutable_options()->set_zone("us-east-1z");
  pb::PlanResponse response;
  grpc::Status s = Plan(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("options.zone: zone \"us-east-1z\" is not in catalog "
                        "aws-spotdnn-prototype (its zones: us-east-1a, us-east-1b, us-west-2a)"));
  // A catalog without zones: no zone to pin.
  *r.mutable_catalog()->mutable_catalog() = Prototype();
  r.mutable_options()->set_zone("us-east-1a");
  s = Plan(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("catalog aws-spotdnn-prototype lists no zones"));
  // A type with a zone listed twice.
  pb::InstanceCatalog twice = ZonedPrototype(0);
  twice.mutable_instance_types(1)->add_zones()->set_name("us-east-1a");
  s = Plan(Request(twice), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("\"us-east-1a\": listed twice"));
}

TEST(EffectiveCatalog, KeepsTheOfferedTypesAtTheirPlacesPricesWithoutZones) {
  pb::InstanceCatalog c = ZonedPrototype(0.5);
  provisioner::Placement west{.zone = "us-west-2a", .region = "us-west-2"};
  auto zoned = ZonedCatalogOf(c);
  ASSERT_EQ(zoned.zones.size(), 5u);
  EXPECT_EQ(zoned.zones[0][2].region, "us-west-2");
  west.catalog = zoned.catalog;
  west.catalog.types = {zoned.catalog.types[1]};
  west.catalog.types[0].spot_price_per_hour = 0.1;
  west.source_types = {1};
  west.type_zones = {"us-west-2a"};
  const pb::InstanceCatalog e = EffectiveCatalog(c, west);
  EXPECT_EQ(e.region(), "us-west-2");
  ASSERT_EQ(e.instance_types_size(), 1);
  EXPECT_EQ(e.instance_types(0).name(), c.instance_types(1).name());
  EXPECT_EQ(e.instance_types(0).spot_price_per_hour(), 0.1);
  EXPECT_EQ(e.instance_types(0).zones_size(), 0);
  EXPECT_EQ(e.parameter_server().SerializeAsString(), c.parameter_server().SerializeAsString());
}

TEST(CatalogZones, AreCheckedInRequestsAndInTheRegistry) {
  pb::InstanceCatalog c = ZonedPrototype(0);
  c.mutable_instance_types(2)->mutable_zones(1)->set_on_demand_price_per_hour(-2);
  pb::PlanRequest r;
  *r.mutable_catalog()->mutable_catalog() = c;
  absl::Status s = CheckRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("catalog.catalog.instance_types[2].zones[1]."
                                     "on_demand_price_per_hour = -2 (g3.8xlarge in us-east-1b)"));
  c = ZonedPrototype(0);
  c.mutable_instance_types(0)->mutable_zones(2)->clear_name();
  DataRegistry registry;
  s = registry.AddCatalog(c);
  EXPECT_THAT(s.message(), HasSubstr("catalog \"aws-spotdnn-prototype\".instance_types[0].zones[2]"
                                     ".name is empty"));
  c = ZonedPrototype(0);
  c.mutable_moves()->set_transfer_price_per_gib(-0.02);
  EXPECT_THAT(CheckCatalogZones(c).message(), HasSubstr("moves.transfer_price_per_gib = -0.02"));
  EXPECT_TRUE(registry.AddCatalog(ZonedPrototype(0)).ok());
}

}  // namespace
}  // namespace spotdnn::services
