// Zones in a running job: where each launch tries to go, which zones are blocked, and the moves a
// takeover (or the deadline guard) makes to another zone, with their cost. The cloud provider
// tries the zones in the order given here and moves on when one has no capacity; spot is short
// (the deadline guard's business) only when every allowed zone refused.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/gateway/job/job_run.h"

namespace spotdnn::job {

namespace {

const pb::InstanceType* TypeIn(const pb::InstanceCatalog& catalog, const std::string& type) {
  for (const pb::InstanceType& t : catalog.instance_types()) {
    if (t.name() == type) return &t;
  }
  return nullptr;
}

const pb::InstanceZone* ZoneOf(const pb::InstanceType& type, const std::string& zone) {
  for (const pb::InstanceZone& z : type.zones()) {
    if (z.name() == zone) return &z;
  }
  return nullptr;
}

}  // namespace

std::string JobRun::RegionOf(const std::string& zone) const {
  for (const pb::InstanceType& t : catalog_.instance_types()) {
    if (const pb::InstanceZone* z = ZoneOf(t, zone); z != nullptr && !z->region().empty()) {
      return z->region();
    }
  }
  return catalog_.region();
}

double JobRun::PriceIn(const std::string& type, const std::string& zone, launcher::Market market) {
  const bool on_demand = market == launcher::Market::kOnDemand;
  const double type_price = on_demand ? on_demand_price_[type] : spot_price_[type];
  const pb::InstanceType* t = TypeIn(catalog_, type);
  const pb::InstanceZone* z = t == nullptr || zone.empty() ? nullptr : ZoneOf(*t, zone);
  if (z == nullptr) return type_price;
  const double price = on_demand ? z->on_demand_price_per_hour() : z->spot_price_per_hour();
  return price > 0 ? price : type_price;
}

double JobRun::CheckpointMb() const {
  return spec_.zones.checkpoint_mb >= 0 ? spec_.zones.checkpoint_mb : workload_.parameter_size_mb();
}

double JobRun::CheckpointCopyS() const {
  const double rate =
      catalog_.moves().transfer_mb_per_s() > 0 ? catalog_.moves().transfer_mb_per_s() : 100;
  return CheckpointMb() / rate;
}

std::vector<std::string> JobRun::LaunchZones(const std::string& type) {
  const std::vector<std::string> offered = services_.provider->ZonesFor(type);
  if (offered.empty()) return {};
  if (!only_zone_.empty()) return {only_zone_};  // a zone return tries its zone alone
  std::vector<std::string> out;
  for (const std::string& zone : ZonesFor(type)) {
    if (std::find(offered.begin(), offered.end(), zone) != offered.end()) out.push_back(zone);
  }
  const absl::Time now = clock_.Now();
  std::stable_partition(out.begin(), out.end(), [&](const std::string& zone) {
    auto it = refused_zones_.find(zone);
    return it == refused_zones_.end() || now - it->second >= options_.guard.probe_every;
  });
  return out;
}

void JobRun::NoteRefusals(const std::vector<std::string>& refused) {
  for (const std::string& line : refused) {
    refused_zones_[line.substr(0, line.find(':'))] = clock_.Now();
  }
}

std::vector<std::string> JobRun::ZonesFor(const std::string& type) {
  const pb::InstanceType* t = TypeIn(catalog_, type);
  if (t == nullptr || t->zones_size() == 0) return {};
  // Where the job runs now: the zone of the newest running worker of the type (any running
  // instance of a synchronous job, whose ranks all-reduce together); else the plan's.
  std::string current;
  int64_t newest = -1;
  for (const auto& [id, i] : instances_) {
    if (i.state != InstanceStatus::kRunning || i.zone.empty() || i.launched_ms < newest) continue;
    if (!sync_ && (i.role != launcher::Role::kWorker || i.instance_type != type)) continue;
    current = i.zone;
    newest = i.launched_ms;
  }
  if (current.empty()) {
    for (const std::string& entry : plan_.zones()) {
      if (absl::StartsWith(entry, type + "=")) current = entry.substr(type.size() + 1);
    }
    if (current.empty()) current = plan_.zone();
  }
  // A parameter-server job's workers stay in its servers' region.
  std::string region = spec_.zones.region;
  if (!sync_ && region.empty()) {
    region = !plan_.region().empty() ? plan_.region() : current.empty() ? "" : RegionOf(current);
  }
  // Time the deadline leaves beyond the work: a move across regions must fit its copy in it.
  const double slack_s = spec_.deadline_s > 0 ? ForecastDeadline() - ElapsedS() - WorkLeftS()
                                              : std::numeric_limits<double>::infinity();
  const std::string current_region = current.empty() ? "" : RegionOf(current);
  std::vector<std::pair<double, std::string>> others;  // (price, zone), catalog order kept
  std::vector<std::string> out;
  for (const pb::InstanceZone& z : t->zones()) {
    if (!spec_.zones.zone.empty() && z.name() != spec_.zones.zone) continue;
    const std::string zone_region = z.region().empty() ? catalog_.region() : z.region();
    if (!region.empty() && zone_region != region) continue;
    if (std::find(spec_.zones.avoid.begin(), spec_.zones.avoid.end(), z.name()) !=
        spec_.zones.avoid.end()) {
      continue;
    }
    if (!current_region.empty() && zone_region != current_region &&
        spec_.revocation_overhead_s + CheckpointCopyS() > slack_s) {
      continue;  // the copy would not fit in the slack: on-demand where it is instead
    }
    if (z.name() == current) {
      out.push_back(z.name());
    } else {
      others.emplace_back(PriceIn(type, z.name(), launcher::Market::kSpot), z.name());
    }
  }
  // Among zones of one price, the one the cloud scores likelier to have spot for the launch
  // first (AWS's spot placement scores where the provider asks them; unscored zones last). A
  // provider that cannot tell leaves the catalog's order.
  std::map<std::string, int> scores;
  if (others.size() > 1) {
    int count = 0;
    for (const pb::InstanceCount& c : plan_.cluster().instances()) {
      if (sync_ || c.instance_type() == type) count += c.count();
    }
    auto got = services_.provider->SpotPlacementScores(type, std::max(1, count));
    if (got.ok()) {
      scores = *std::move(got);
    } else if (!scores_refused_logged_) {
      scores_refused_logged_ = true;
      (void)Log("placement_scores",
                nlohmann::json{{"instance_type", type}, {"error", got.status().ToString()}}.dump());
    }
  }
  auto score = [&](const std::string& zone) {
    auto it = scores.find(zone);
    return it == scores.end() ? 0 : it->second;
  };
  std::stable_sort(others.begin(), others.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return score(a.second) > score(b.second);
  });
  for (const auto& [price, zone] : others) out.push_back(zone);
  return out;
}

std::string JobRun::CheckpointRegion() const {
  const InstanceRecord* newest = nullptr;
  for (const auto& [id, i] : instances_) {
    if (!i.zone.empty() && (newest == nullptr || i.launched_ms >= newest->launched_ms)) newest = &i;
  }
  if (newest != nullptr) return RegionOf(newest->zone);
  if (!plan_.region().empty()) return plan_.region();
  return plan_.zone().empty() ? catalog_.region() : RegionOf(plan_.zone());
}

absl::Status JobRun::PlaceCheckpoint(launcher::ClusterLaunchRequest& request,
                                     const std::string& to) {
  auto keep_to_region = [&](std::vector<std::string>& zones) {
    std::vector<std::string> kept;
    for (const std::string& z : zones) {
      if (RegionOf(z) == to) kept.push_back(z);
    }
    if (!kept.empty()) zones = std::move(kept);
  };
  for (launcher::WorkerGroup& g : request.workers) keep_to_region(g.zones);
  keep_to_region(request.ps_zones);
  // Every instance of this launch reads and writes that region's folder.
  const std::string uri = CheckpointUriIn(spec_, job_.id, to);
  auto point = [&](std::map<std::string, std::string>& env) {
    if (env.count("SPOTDNN_CHECKPOINT_URI") > 0) env["SPOTDNN_CHECKPOINT_URI"] = uri;
  };
  point(request.extra_env);
  for (launcher::WorkerGroup& g : request.workers) point(g.env);
  // Nothing to copy before the first instance (no checkpoint yet), or within the region.
  const std::string from = CheckpointRegion();
  bool launched_before = false;
  for (const auto& [id, i] : instances_) launched_before |= !i.zone.empty();
  if (to == from || !launched_before) return absl::OkStatus();
  if (!services_.copy_checkpoint) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoints = \"", spec_.checkpoint_uri, "\": moving from ", from, " to ", to,
                     " needs the checkpoint copied, and this gateway has no copier"));
  }
  const std::string from_uri = CheckpointUriIn(spec_, job_.id, from);
  auto copied = services_.copy_checkpoint(from_uri, from, uri, to);
  if (!copied.ok()) {
    return absl::Status(
        copied.status().code(),
        absl::StrCat("copying the checkpoint from ", from_uri, " to ", uri, " (a move from ", from,
                     " to ", to, "): ", copied.status().message()));
  }
  const nlohmann::json detail = {{"from_region", from},    {"to_region", to},
                                 {"from", from_uri},       {"to", uri},
                                 {"files", copied->files}, {"bytes", copied->bytes}};
  return Log("checkpoint_copy", detail.dump());
}

absl::StatusOr<launcher::ClusterLaunchResult> JobRun::LaunchInRegions(
    const launcher::ClusterLaunchRequest& request) {
  if (!CheckpointsPerRegion(spec_)) return launcher::LaunchCluster(*services_.provider, request);
  // The regions of the zones the launch would try, in their order.
  std::vector<std::string> regions;
  for (const launcher::WorkerGroup& g : request.workers) {
    for (const std::string& z : g.zones) {
      const std::string r = RegionOf(z);
      if (std::find(regions.begin(), regions.end(), r) == regions.end()) regions.push_back(r);
    }
  }
  if (regions.empty()) regions.push_back(CheckpointRegion());
  std::vector<std::string> refused;
  absl::StatusOr<launcher::ClusterLaunchResult> result;
  for (size_t k = 0; k < regions.size(); ++k) {
    launcher::ClusterLaunchRequest here = request;
    if (auto s = PlaceCheckpoint(here, regions[k]); !s.ok()) return s;
    result = launcher::LaunchCluster(*services_.provider, here);
    const bool last = k + 1 == regions.size();
    if (!result.ok()) {
      if (result.status().code() == absl::StatusCode::kResourceExhausted && !last) continue;
      return result;
    }
    refused.insert(refused.end(), result->refused_zones.begin(), result->refused_zones.end());
    // The next region only when this one had no capacity for any of it.
    if (!result->instances.empty() || !result->error.ok() || result->exhausted_types.empty()) {
      break;
    }
  }
  result->refused_zones = std::move(refused);
  return result;
}

absl::Status JobRun::NoteMove(const InstanceRecord& launched) {
  if (launched.role != launcher::Role::kWorker || launched.zone.empty() ||
      launched.reason == LaunchReason::kPlan) {
    return absl::OkStatus();
  }
  // The zone its type (a synchronous job: the job) last ran in, before this launch.
  std::string from;
  int64_t latest = -1;
  for (const auto& [id, i] : instances_) {
    if (id == launched.id || i.zone.empty() || i.role != launcher::Role::kWorker ||
        i.launched_ms > launched.launched_ms || i.launched_ms < latest) {
      continue;
    }
    if (!sync_ && i.instance_type != launched.instance_type) continue;
    from = i.zone;
    latest = i.launched_ms;
  }
  if (from.empty() || from == launched.zone) return absl::OkStatus();
  const bool across = RegionOf(from) != RegionOf(launched.zone);
  const double changeover_usd = launched.price_per_hour * spec_.revocation_overhead_s / 3600;
  const double gib = CheckpointMb() * 1e6 / (1024.0 * 1024 * 1024);
  const double transfer_usd = across ? gib * catalog_.moves().transfer_price_per_gib() : 0;
  const double transfer_s = across ? CheckpointCopyS() : 0;
  const nlohmann::json detail = {{"instance", launched.id},
                                 {"instance_type", launched.instance_type},
                                 {"market", std::string(launcher::MarketName(launched.market))},
                                 {"from", from},
                                 {"to", launched.zone},
                                 {"across_regions", across},
                                 {"changeover_s", spec_.revocation_overhead_s},
                                 {"transfer_s", transfer_s},
                                 {"transfer_usd", transfer_usd},
                                 {"cost_usd", changeover_usd + transfer_usd}};
  if (auto s = Log("move", detail.dump()); !s.ok()) return s;
  Emit(MovedEvent{.instance = launched.id,
                  .instance_type = launched.instance_type,
                  .from = from,
                  .to = launched.zone,
                  .across_regions = across,
                  .cost_usd = changeover_usd + transfer_usd});
  return absl::OkStatus();
}

}  // namespace spotdnn::job
