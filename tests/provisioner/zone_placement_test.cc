// Where a plan may go when its catalog lists zones (provisioner/zone_placement.h): a synchronous
// job's candidates per zone, a parameter-server job's per region, the pins and blocks, and the
// errors that name the field and zone.
#include "provisioner/zone_placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::provisioner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

predictor::InstanceType Type(const std::string& name, double spot, double on_demand) {
  return {.name = name,
          .gpu_type = "T4",
          .gpus = 1,
          .gpu_memory_gib = 16,
          .spot_price_per_hour = spot,
          .on_demand_price_per_hour = on_demand,
          .quota = 4};
}

// Two types in us-east-1 (the catalog's region) and us-west-2: "big" is not offered in
// us-east-1b, and is cheaper in us-east-1c; "small" is cheaper in us-west-2b.
ZonedCatalog TwoRegions() {
  ZonedCatalog z;
  z.catalog.name = "test-zones";
  z.catalog.provider = "aws";
  z.catalog.region = "us-east-1";
  z.catalog.types = {Type("big", 1.0, 3.0), Type("small", 0.4, 1.2)};
  z.catalog.parameter_server = {.instance_type = "m5", .bandwidth_mb_per_s = 1000};
  z.zones = {
      {{.name = "us-east-1a"},
       {.name = "us-east-1c", .spot_price_per_hour = 0.8},
       {.name = "us-west-2a", .region = "us-west-2"}},
      {{.name = "us-east-1a"},
       {.name = "us-east-1b"},
       {.name = "us-east-1c"},
       {.name = "us-west-2a", .region = "us-west-2"},
       {.name = "us-west-2b",
        .region = "us-west-2",
        .spot_price_per_hour = 0.3,
        .on_demand_price_per_hour = 1.1}},
  };
  return z;
}

std::vector<std::string> NamesOf(const Placements& p) {
  std::vector<std::string> out;
  for (const Placement& c : p.candidates) out.push_back(c.name());
  return out;
}

std::vector<std::string> TypesOf(const Placement& p) {
  std::vector<std::string> out;
  for (const predictor::InstanceType& t : p.catalog.types) out.push_back(t.name);
  return out;
}

TEST(ZonePlacement, ACatalogWithoutZonesIsOneCandidateAsItIs) {
  ZonedCatalog z = TwoRegions();
  z.zones = {{}, {}};
  auto p = PlaceJob(z, {.zones_without_capacity = {"us-east-1a"}}, /*synchronous=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->zoned);
  ASSERT_EQ(p->candidates.size(), 1u);
  const Placement& only = p->candidates[0];
  EXPECT_EQ(only.zone, "");
  EXPECT_EQ(only.region, "");
  EXPECT_EQ(TypesOf(only), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(only.catalog.types[0].spot_price_per_hour, 1.0);
  EXPECT_EQ(only.catalog.region, "us-east-1");
  EXPECT_THAT(only.source_types, ElementsAre(0, 1));
}

TEST(ZonePlacement, ACatalogWithoutZonesRefusesAZoneToPinOrAvoid) {
  ZonedCatalog z = TwoRegions();
  z.zones = {{}, {}};
  auto pinned = PlaceJob(z, {.zone = "us-east-1a"}, true);
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pinned.status().message(), HasSubstr("options.zone = \"us-east-1a\""));
  EXPECT_THAT(pinned.status().message(), HasSubstr("catalog test-zones lists no zones"));
  auto avoided = PlaceJob(z, {.avoid_zones = {"x", "y"}}, false);
  ASSERT_FALSE(avoided.ok());
  EXPECT_THAT(avoided.status().message(), HasSubstr("options.avoid_zones = \"x,y\""));
}

TEST(ZonePlacement, ASynchronousJobHasOneCandidatePerZoneAtItsPrices) {
  auto p = PlaceJob(TwoRegions(), {}, /*synchronous=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->zoned);
  EXPECT_THAT(NamesOf(*p),
              ElementsAre("us-east-1a", "us-east-1c", "us-west-2a", "us-east-1b", "us-west-2b"));
  const Placement& c = p->candidates[1];  // us-east-1c: big at its own price there
  EXPECT_EQ(c.zone, "us-east-1c");
  EXPECT_EQ(c.region, "us-east-1");
  EXPECT_EQ(TypesOf(c), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(c.catalog.types[0].spot_price_per_hour, 0.8);
  EXPECT_EQ(c.catalog.types[0].on_demand_price_per_hour, 3.0);  // 0: the type's
  EXPECT_THAT(c.type_zones, ElementsAre("us-east-1c", "us-east-1c"));
  // us-east-1b offers only small; us-west-2b small at its prices, in its region.
  EXPECT_EQ(TypesOf(p->candidates[3]), (std::vector<std::string>{"small"}));
  EXPECT_THAT(p->candidates[3].source_types, ElementsAre(1));
  const Placement& west = p->candidates[4];
  EXPECT_EQ(west.region, "us-west-2");
  EXPECT_EQ(west.catalog.region, "us-west-2");
  EXPECT_EQ(west.catalog.types[0].spot_price_per_hour, 0.3);
  EXPECT_EQ(west.catalog.types[0].on_demand_price_per_hour, 1.1);
}

TEST(ZonePlacement, AParameterServerJobHasOneCandidatePerRegionEachTypeInItsCheapestZone) {
  auto p = PlaceJob(TwoRegions(), {}, /*synchronous=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(NamesOf(*p), ElementsAre("us-east-1", "us-west-2"));
  const Placement& east = p->candidates[0];
  EXPECT_EQ(east.zone, "");
  EXPECT_EQ(TypesOf(east), (std::vector<std::string>{"big", "small"}));
  // big is cheapest in us-east-1c; small costs the same in 1a, 1b and 1c: the first listed.
  EXPECT_THAT(east.type_zones, ElementsAre("us-east-1c", "us-east-1a"));
  EXPECT_EQ(east.catalog.types[0].spot_price_per_hour, 0.8);
  // The parameter server stays in the region, as the catalog gives it.
  EXPECT_EQ(east.catalog.parameter_server.instance_type, "m5");
  const Placement& west = p->candidates[1];
  EXPECT_THAT(west.type_zones, ElementsAre("us-west-2a", "us-west-2b"));
  EXPECT_EQ(west.catalog.types[1].spot_price_per_hour, 0.3);
}

TEST(ZonePlacement, APinnedZoneIsTheOnlyCandidate) {
  auto sync = PlaceJob(TwoRegions(), {.zone = "us-east-1b"}, true);
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_THAT(NamesOf(*sync), ElementsAre("us-east-1b"));
  // A parameter-server job pinned to a zone: every type there, or left out.
  auto ps = PlaceJob(TwoRegions(), {.zone = "us-east-1b"}, false);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ASSERT_EQ(ps->candidates.size(), 1u);
  EXPECT_EQ(ps->candidates[0].zone, "us-east-1b");
  EXPECT_EQ(ps->candidates[0].region, "us-east-1");
  EXPECT_EQ(TypesOf(ps->candidates[0]), (std::vector<std::string>{"small"}));
}

TEST(ZonePlacement, APinnedRegionKeepsItsZonesOnly) {
  auto sync = PlaceJob(TwoRegions(), {.region = "us-west-2"}, true);
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_THAT(NamesOf(*sync), ElementsAre("us-west-2a", "us-west-2b"));
  auto ps = PlaceJob(TwoRegions(), {.region = "us-west-2"}, false);
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(NamesOf(*ps), ElementsAre("us-west-2"));
}

TEST(ZonePlacement, AvoidedZonesAndZonesWithoutCapacityAreLeftOutAndSaidSo) {
  auto sync = PlaceJob(TwoRegions(),
                       {.avoid_zones = {"us-east-1a", "us-east-1a"},
                        .zones_without_capacity = {"us-east-1c", "eu-nowhere-1a"}},
                       true);
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_THAT(NamesOf(*sync), ElementsAre("us-west-2a", "us-east-1b", "us-west-2b"));
  EXPECT_THAT(sync->left_out,
              ElementsAre("us-east-1a: avoided", "us-east-1c: no spot capacity now"));
  // Parameter server: big's cheap zone has no capacity, so big runs in us-east-1a at its price.
  auto ps = PlaceJob(TwoRegions(), {.zones_without_capacity = {"us-east-1c"}}, false);
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(ps->candidates[0].type_zones, ElementsAre("us-east-1a", "us-east-1a"));
  EXPECT_EQ(ps->candidates[0].catalog.types[0].spot_price_per_hour, 1.0);
}

TEST(ZonePlacement, UnknownZonesAndRegionsAreRefusedNamingTheFieldAndTheCatalogsZones) {
  auto zone = PlaceJob(TwoRegions(), {.zone = "us-east-1z"}, true);
  ASSERT_FALSE(zone.ok());
  EXPECT_EQ(zone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zone.status().message(),
              HasSubstr("options.zone: zone \"us-east-1z\" is not in catalog test-zones (its "
                        "zones: us-east-1a, us-east-1c, us-west-2a, us-east-1b, us-west-2b)"));
  auto region = PlaceJob(TwoRegions(), {.region = "eu-west-1"}, false);
  ASSERT_FALSE(region.ok());
  EXPECT_THAT(region.status().message(),
              HasSubstr("options.region: region \"eu-west-1\" is not in catalog test-zones (its "
                        "regions: us-east-1, us-west-2)"));
  auto avoid = PlaceJob(TwoRegions(), {.avoid_zones = {"us-east-1a", "nowhere"}}, true);
  ASSERT_FALSE(avoid.ok());
  EXPECT_THAT(avoid.status().message(), HasSubstr("options.avoid_zones: zone \"nowhere\""));
}

TEST(ZonePlacement, APinnedZoneThatIsBlockedOrOutsideThePinnedRegionIsRefused) {
  auto avoided =
      PlaceJob(TwoRegions(), {.zone = "us-east-1a", .avoid_zones = {"us-east-1a"}}, true);
  ASSERT_FALSE(avoided.ok());
  EXPECT_THAT(avoided.status().message(),
              HasSubstr("options.zone: zone \"us-east-1a\" is also in options.avoid_zones"));
  auto elsewhere = PlaceJob(TwoRegions(), {.zone = "us-east-1a", .region = "us-west-2"}, false);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_THAT(elsewhere.status().message(), HasSubstr("is in region us-east-1"));
  auto full = PlaceJob(TwoRegions(),
                       {.zone = "us-west-2a", .zones_without_capacity = {"us-west-2a"}}, true);
  ASSERT_FALSE(full.ok());
  EXPECT_THAT(full.status().message(), HasSubstr("has no spot capacity now"));
}

TEST(ZonePlacement, BlockingEveryZoneLeavesNoZoneAndSaysWhich) {
  auto p = PlaceJob(TwoRegions(),
                    {.region = "us-west-2",
                     .avoid_zones = {"us-west-2a"},
                     .zones_without_capacity = {"us-west-2b"}},
                    true);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("options.avoid_zones = \"us-west-2a\" with "
                        "options.zones_without_capacity = \"us-west-2b\": leaves no zone to run "
                        "in (the zones of region us-west-2: us-west-2a, us-west-2b)"));
}

TEST(ZonePlacement, ZonesAreValidated) {
  ZonedCatalog twice = TwoRegions();
  twice.zones[0].push_back({.name = "us-east-1a"});
  auto s = ValidateZones(twice);
  EXPECT_THAT(s.message(), HasSubstr("instance_types[0] (big).zones[3].name = \"us-east-1a\": "
                                     "listed twice for this type"));
  ZonedCatalog unnamed = TwoRegions();
  unnamed.zones[1][2].name = "";
  EXPECT_THAT(ValidateZones(unnamed).message(),
              HasSubstr("instance_types[1] (small).zones[2].name is empty"));
  ZonedCatalog negative = TwoRegions();
  negative.zones[1][0].spot_price_per_hour = -1;
  EXPECT_THAT(ValidateZones(negative).message(), HasSubstr("prices must be >= 0"));
  ZonedCatalog two_regions = TwoRegions();
  two_regions.zones[1][3].region = "us-west-1";
  EXPECT_THAT(ValidateZones(two_regions).message(),
              HasSubstr("zone \"us-west-2a\" is in region \"us-west-2\" for another type"));
  ZonedCatalog missing = TwoRegions();
  missing.zones[0].clear();
  EXPECT_THAT(ValidateZones(missing).message(), HasSubstr("(big).zones is empty"));
  // PlaceJob validates first.
  EXPECT_FALSE(PlaceJob(twice, {}, true).ok());
  EXPECT_TRUE(ValidateZones(TwoRegions()).ok());
}

}  // namespace
}  // namespace spotdnn::provisioner
