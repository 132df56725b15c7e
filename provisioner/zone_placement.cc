#include "provisioner/zone_placement.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace spotdnn::provisioner {
namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A zone of the catalog: its name and region (the catalog's when the zone names none).
struct ZoneInfo {
  std::string name;
  std::string region;
};

const std::string& RegionOf(const TypeZone& z, const predictor::InstanceCatalog& catalog) {
  return z.region.empty() ? catalog.region : z.region;
}

// The type's price in zone `z` (the type's own where the zone gives none).
predictor::InstanceType PricedIn(const predictor::InstanceType& t, const TypeZone& z) {
  predictor::InstanceType out = t;
  if (z.spot_price_per_hour > 0) out.spot_price_per_hour = z.spot_price_per_hour;
  if (z.on_demand_price_per_hour > 0) out.on_demand_price_per_hour = z.on_demand_price_per_hour;
  return out;
}

std::vector<std::string> Names(const std::vector<ZoneInfo>& zones) {
  std::vector<std::string> out;
  for (const ZoneInfo& z : zones) out.push_back(z.name);
  return out;
}

}  // namespace

bool ZonedCatalog::HasZones() const {
  return std::any_of(zones.begin(), zones.end(), [](const auto& z) { return !z.empty(); });
}

absl::Status ValidateZones(const ZonedCatalog& zoned) {
  const predictor::InstanceCatalog& c = zoned.catalog;
  if (zoned.zones.size() != c.types.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("catalog \"%s\": zones for %d types, but it has %d", c.name,
                        zoned.zones.size(), c.types.size()));
  }
  if (!zoned.HasZones()) return absl::OkStatus();
  std::map<std::string, std::string> region_of;  // zone -> region, across types
  for (size_t k = 0; k < c.types.size(); ++k) {
    const std::string field =
        absl::StrFormat("catalog \"%s\": instance_types[%d] (%s)", c.name, k, c.types[k].name);
    if (zoned.zones[k].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".zones is empty while other types list theirs: list the zones it runs in"));
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < zoned.zones[k].size(); ++i) {
      const TypeZone& z = zoned.zones[k][i];
      const std::string at = absl::StrCat(field, ".zones[", i, "]");
      if (z.name.empty()) return absl::InvalidArgumentError(absl::StrCat(at, ".name is empty"));
      if (!seen.insert(z.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".name = \"", z.name, "\": listed twice for this type"));
      }
      if (z.spot_price_per_hour < 0 || z.on_demand_price_per_hour < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s (%s): prices must be >= 0 (0 = the type's), not spot %g, on-demand %g", at, z.name,
            z.spot_price_per_hour, z.on_demand_price_per_hour));
      }
      const std::string& region = RegionOf(z, c);
      if (auto [it, fresh] = region_of.emplace(z.name, region); !fresh && it->second != region) {
        return absl::InvalidArgumentError(absl::StrCat(at, ".region = \"", region, "\": zone \"",
                                                       z.name, "\" is in region \"", it->second,
                                                       "\" for another type"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Placements> PlaceJob(const ZonedCatalog& zoned, const ZoneRequest& request,
                                    bool synchronous) {
  if (auto s = ValidateZones(zoned); !s.ok()) return s;
  const predictor::InstanceCatalog& c = zoned.catalog;
  Placements out;
  if (!zoned.HasZones()) {
    for (auto [field, value] :
         {std::pair{"options.zone", request.zone}, std::pair{"options.region", request.region},
          std::pair{"options.avoid_zones", absl::StrJoin(request.avoid_zones, ",")}}) {
      if (!value.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " = \"", value, "\": catalog ", c.name, " lists no zones"));
      }
    }
    Placement whole{.catalog = c};
    for (size_t k = 0; k < c.types.size(); ++k) {
      whole.source_types.push_back(static_cast<int>(k));
      whole.type_zones.emplace_back();
    }
    out.candidates.push_back(std::move(whole));
    return out;
  }
  out.zoned = true;
  // Zones and regions in the order the catalog first lists them.
  std::vector<ZoneInfo> zones;
  std::vector<std::string> regions;
  for (const auto& list : zoned.zones) {
    for (const TypeZone& z : list) {
      if (std::none_of(zones.begin(), zones.end(),
                       [&](const ZoneInfo& i) { return i.name == z.name; })) {
        zones.push_back({z.name, RegionOf(z, c)});
      }
      if (!Contains(regions, RegionOf(z, c))) regions.push_back(RegionOf(z, c));
    }
  }
  const std::vector<std::string> zone_names = Names(zones);
  auto region_of = [&](const std::string& zone) -> const std::string& {
    for (const ZoneInfo& z : zones) {
      if (z.name == zone) return z.region;
    }
    return c.region;
  };
  if (!request.zone.empty() && !Contains(zone_names, request.zone)) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.zone: zone \"", request.zone, "\" is not in catalog ", c.name,
                     " (its zones: ", absl::StrJoin(zone_names, ", "), ")"));
  }
  if (!request.region.empty() && !Contains(regions, request.region)) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.region: region \"", request.region, "\" is not in catalog ", c.name,
                     " (its regions: ", absl::StrJoin(regions, ", "), ")"));
  }
  for (const std::string& a : request.avoid_zones) {
    if (!Contains(zone_names, a)) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.avoid_zones: zone \"", a, "\" is not in catalog ", c.name,
                       " (its zones: ", absl::StrJoin(zone_names, ", "), ")"));
    }
  }
  if (!request.zone.empty()) {
    if (Contains(request.avoid_zones, request.zone)) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.zone: zone \"", request.zone, "\" is also in options.avoid_zones"));
    }
    if (!request.region.empty() && region_of(request.zone) != request.region) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.zone: zone \"", request.zone, "\" is in region ", region_of(request.zone),
          ", not in options.region \"", request.region, "\""));
    }
  }
  // The zones the pins leave, and of those the ones that may take the job now.
  auto pinned = [&](const std::string& zone) {
    return (request.zone.empty() || zone == request.zone) &&
           (request.region.empty() || region_of(zone) == request.region);
  };
  auto allowed = [&](const std::string& zone) {
    return pinned(zone) && !Contains(request.avoid_zones, zone) &&
           !Contains(request.zones_without_capacity, zone);
  };
  for (const ZoneInfo& z : zones) {
    if (!pinned(z.name)) continue;
    if (Contains(request.avoid_zones, z.name)) {
      out.left_out.push_back(absl::StrCat(z.name, ": avoided"));
    } else if (Contains(request.zones_without_capacity, z.name)) {
      out.left_out.push_back(absl::StrCat(z.name, ": no spot capacity now"));
    }
  }
  if (synchronous) {
    for (const ZoneInfo& z : zones) {
      if (!allowed(z.name)) continue;
      Placement p{.zone = z.name, .region = z.region, .catalog = c};
      p.catalog.region = z.region;
      p.catalog.types.clear();
      for (size_t k = 0; k < c.types.size(); ++k) {
        for (const TypeZone& tz : zoned.zones[k]) {
          if (tz.name != z.name) continue;
          p.catalog.types.push_back(PricedIn(c.types[k], tz));
          p.source_types.push_back(static_cast<int>(k));
          p.type_zones.push_back(z.name);
        }
      }
      out.candidates.push_back(std::move(p));
    }
  } else {
    for (const std::string& region : regions) {
      Placement p{.zone = request.zone, .region = region, .catalog = c};
      p.catalog.region = region;
      p.catalog.types.clear();
      for (size_t k = 0; k < c.types.size(); ++k) {
        const TypeZone* best = nullptr;
        for (const TypeZone& tz : zoned.zones[k]) {
          if (RegionOf(tz, c) != region || !allowed(tz.name)) continue;
          if (best == nullptr || PricedIn(c.types[k], tz).spot_price_per_hour <
                                     PricedIn(c.types[k], *best).spot_price_per_hour) {
            best = &tz;
          }
        }
        if (best == nullptr) continue;
        p.catalog.types.push_back(PricedIn(c.types[k], *best));
        p.source_types.push_back(static_cast<int>(k));
        p.type_zones.push_back(best->name);
      }
      if (!p.catalog.types.empty()) out.candidates.push_back(std::move(p));
    }
  }
  if (out.candidates.empty()) {
    // Only the blocks can empty a catalog that lists zones: say which.
    const std::string scope = absl::StrCat(
        "the zones of ", request.region.empty() ? absl::StrCat("catalog ", c.name)
                                                : absl::StrCat("region ", request.region));
    if (!request.zone.empty() && Contains(request.zones_without_capacity, request.zone)) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.zone: zone \"", request.zone,
                       "\" has no spot capacity now (options.zones_without_capacity)"));
    }
    std::string blocks;
    if (!request.avoid_zones.empty()) {
      blocks =
          absl::StrCat("options.avoid_zones = \"", absl::StrJoin(request.avoid_zones, ","), "\"");
    }
    if (!request.zones_without_capacity.empty()) {
      absl::StrAppend(&blocks, blocks.empty() ? "" : " with ",
                      "options.zones_without_capacity = \"",
                      absl::StrJoin(request.zones_without_capacity, ","), "\"");
    }
    std::vector<std::string> in_scope;
    for (const ZoneInfo& z : zones) {
      if (pinned(z.name)) in_scope.push_back(z.name);
    }
    return absl::InvalidArgumentError(absl::StrCat(blocks, ": leaves no zone to run in (", scope,
                                                   ": ", absl::StrJoin(in_scope, ", "), ")"));
  }
  return out;
}

}  // namespace spotdnn::provisioner
