// Where a plan may go when its catalog lists zones: the candidate placements of a job, each an
// effective catalog (the types offered there, at that place's prices) the planner plans as it
// plans any catalog. A synchronous (all-reduce) job runs every instance in one zone, so it has one
// candidate per zone; a parameter-server job runs each type in its cheapest zone of one region
// (its parameter server stays in that region), so it has one candidate per region.
#ifndef SPOTDNN_PROVISIONER_ZONE_PLACEMENT_H_
#define SPOTDNN_PROVISIONER_ZONE_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "predictor/types.h"

namespace spotdnn::provisioner {

// A zone an instance type runs in; prices of 0 are the type's.
struct TypeZone {
  std::string name;    // "us-east-1a"
  std::string region;  // empty: the catalog's region
  double spot_price_per_hour = 0;
  double on_demand_price_per_hour = 0;
};

// A catalog with the zones of each of its types (zones[k] for catalog.types[k]; every list empty
// when the catalog lists no zones).
struct ZonedCatalog {
  predictor::InstanceCatalog catalog;
  std::vector<std::vector<TypeZone>> zones;

  // Whether any type lists a zone.
  bool HasZones() const;
};

// Where the caller allows the plan to go (PlanOptions zone, region, avoid_zones and
// zones_without_capacity); empty: anywhere the catalog lists.
struct ZoneRequest {
  std::string zone;                                 // only this zone
  std::string region;                               // only this region's zones
  std::vector<std::string> avoid_zones;             // never these
  std::vector<std::string> zones_without_capacity;  // not these now (names not listed: ignored)
};

// One place a job may run: `catalog` is what the planner plans with there.
struct Placement {
  std::string zone;    // a synchronous job's zone (or a pinned zone); empty otherwise
  std::string region;  // empty only for a catalog without zones
  predictor::InstanceCatalog catalog;
  std::vector<int> source_types;        // catalog.types[i] is the zoned catalog's types[this[i]]
  std::vector<std::string> type_zones;  // the zone catalog.types[i] runs in (empty: no zones)

  // The zone, else the region (what the place is called in a list of places).
  const std::string& name() const { return zone.empty() ? region : zone; }
};

// The candidates of one job, and the zones left out and why ("us-east-1b: avoided").
struct Placements {
  bool zoned = false;  // false: the catalog lists no zones, and the one candidate is it as it is
  std::vector<Placement> candidates;  // in the order the catalog first lists their zones
  std::vector<std::string> left_out;
};

// OK when the zones of `zoned` are usable: one list per type, no type without zones beside types
// with zones, names set and listed once per type, prices >= 0, and a zone in one region only.
// Otherwise INVALID_ARGUMENT naming the type and zone.
absl::Status ValidateZones(const ZonedCatalog& zoned);

// The placements a job of `zoned` may have under `request` (see the file comment). A catalog
// without zones is one candidate, the catalog unchanged. Ties in price go to the zone listed
// first. INVALID_ARGUMENT names the field and value (options.zone, options.region,
// options.avoid_zones) for a zone or region the catalog does not list, a pinned zone that is also
// avoided or outside the pinned region, and a request that leaves no zone to run in.
absl::StatusOr<Placements> PlaceJob(const ZonedCatalog& zoned, const ZoneRequest& request,
                                    bool synchronous);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_ZONE_PLACEMENT_H_
