// A running parameter-server job's return to a cheaper zone: when a worker type runs on spot in
// one zone and a cheaper allowed zone would pay for the move over the work left (the simulator's
// zone rule, provisioner/deadline/zone_choice.h), its workers are launched there and, as they
// land, replace the ones in the dearer zone. A synchronous job is not moved this way: its ranks
// all-reduce together, and moving them is a restart of the whole job.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "provisioner/deadline/zone_choice.h"
#include "services/gateway/job/job_run.h"

namespace spotdnn::job {

using launcher::Market;

absl::Status JobRun::StopWorkers(const std::vector<std::string>& ids, const std::string& type,
                                 const std::string& why) {
  if (ids.empty()) return absl::OkStatus();
  absl::Status s = services_.provider->Terminate(ids);
  if (!s.ok() && !absl::IsNotFound(s)) return s;
  for (const std::string& id : ids) {
    InstanceRecord& i = instances_[id];
    i.state = InstanceStatus::kEnded;
    i.ended_ms = NowMs();
    if (auto st = services_.store->PutInstance(i); !st.ok()) return st;
    if (services_.detector != nullptr) (void)services_.detector->Unregister(id);
    if (auto st = Log("ended", absl::StrCat(id, " (", why, ")")); !st.ok()) return st;
    Emit(InstanceEndedEvent{.instance = id, .instance_type = type});
  }
  return absl::OkStatus();
}

absl::Status JobRun::ZoneReturnTick() {
  if (sync_ || job_.started_ms == 0 || job_.state != JobState::kRunning || restoring_) {
    return absl::OkStatus();
  }
  const absl::Time now = clock_.Now();
  if (now < next_zone_check_) return absl::OkStatus();
  next_zone_check_ = now + options_.guard.check_every;
  // Not while a revocation is being handled: its takeover picks the zone.
  auto revocations = services_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (const RevocationRecord& r : *revocations) {
    if (r.status == RevocationStatus::kPending) return absl::OkStatus();
  }
  // Each type's running workers: all on spot, in one zone.
  std::map<std::string, std::vector<const InstanceRecord*>> by_type;
  for (const auto& [id, i] : instances_) {
    if (i.role == launcher::Role::kWorker && i.state != InstanceStatus::kEnded) {
      by_type[i.instance_type].push_back(&i);
    }
  }
  for (const auto& [type, workers] : by_type) {
    if (guard_ != nullptr && guard_->Wanted(type) > 0) continue;  // the guard has the type
    const std::string from = workers.front()->zone;
    const bool settled = std::all_of(workers.begin(), workers.end(), [&](const InstanceRecord* i) {
      return i->state == InstanceStatus::kRunning && i->market == Market::kSpot && i->zone == from;
    });
    if (!settled || from.empty()) continue;
    const std::vector<std::string> offered = services_.provider->ZonesFor(type);
    std::vector<std::string> zones;
    for (const std::string& z : ZonesFor(type)) {
      if (std::find(offered.begin(), offered.end(), z) != offered.end()) zones.push_back(z);
    }
    const auto here = std::find(zones.begin(), zones.end(), from);
    if (zones.size() < 2 || here == zones.end()) continue;
    // The zones as the rule sees them: a zone is worth a try unless it refused, or a return
    // tried it, within the last probe interval (its capacity is known only by trying).
    std::vector<provisioner::deadline::ZoneOption> options(zones.size());
    for (size_t k = 0; k < zones.size(); ++k) {
      options[k].spot_price_per_hour = PriceIn(type, zones[k], Market::kSpot);
      auto refused = refused_zones_.find(zones[k]);
      auto tried = zone_tried_.find(absl::StrCat(type, "@", zones[k]));
      const bool recent =
          (refused != refused_zones_.end() && now - refused->second < options_.guard.probe_every) ||
          (tried != zone_tried_.end() && now - tried->second < options_.guard.probe_every);
      options[k].has_capacity = zones[k] == from || !recent;
    }
    provisioner::deadline::ZoneJob job{
        .current = static_cast<int>(here - zones.begin()),
        .work_left_s = WorkLeftS(),
        .changeover_s = spec_.revocation_overhead_s,
        .slack_s = spec_.deadline_s > 0 ? ForecastDeadline() - ElapsedS() - WorkLeftS()
                                        : std::numeric_limits<double>::infinity(),
        .instances = static_cast<int>(workers.size())};
    const int choice = provisioner::deadline::ChooseSpotZone(options, job);
    if (choice < 0 || zones[choice] == from) continue;
    const std::string to = zones[choice];
    zone_tried_[absl::StrCat(type, "@", to)] = now;
    const int number = ++zone_returns_;
    const int count = static_cast<int>(workers.size());
    const int first_index = job_.next_worker_index;
    job_.next_worker_index += count;
    if (auto s = Save(); !s.ok()) return s;
    const nlohmann::json record = {
        {"number", number},
        {"instance_type", type},
        {"from", from},
        {"to", to},
        {"count", count},
        {"first_index", first_index},
        {"from_price_per_hour", options[job.current].spot_price_per_hour},
        {"to_price_per_hour", options[choice].spot_price_per_hour},
        {"work_left_s", job.work_left_s}};
    // Written before acting on it: a resumed gateway carries out what was not done.
    if (auto s = Log("zone-return", record.dump()); !s.ok()) return s;
    if (auto s = CarryOutZoneReturn(number, type, from, to, count, first_index); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status JobRun::CarryOutZoneReturn(int number, const std::string& type,
                                        const std::string& from, const std::string& to, int count,
                                        int first_index) {
  only_zone_ = to;
  auto launched = Launch({{type, count}}, first_index, absl::StrCat(job_.id, "-zone-", number, "-"),
                         plan_.prediction(), LaunchReason::kZoneReturn, /*with_servers=*/false, {},
                         Market::kSpot);
  only_zone_.clear();
  std::vector<std::string> landed, stopped;
  if (launched.ok()) {
    for (const launcher::Instance& i : launched->instances) {
      if (i.zone == to) landed.push_back(i.id);
    }
  } else if (!absl::IsResourceExhausted(launched.status())) {
    const std::string message = absl::StrCat("zone return ", number, " of ", type, " to ", to, ": ",
                                             launched.status().message());
    Emit(WarningEvent{.message = message});
    if (auto s = Log("warning", message); !s.ok()) return s;
  }
  // As many of the dearer zone's workers go as landed in the cheaper one, the oldest first.
  std::vector<const InstanceRecord*> old;
  for (const auto& [id, i] : instances_) {
    if (i.role == launcher::Role::kWorker && i.instance_type == type && i.zone == from &&
        i.state == InstanceStatus::kRunning) {
      old.push_back(&i);
    }
  }
  std::sort(old.begin(), old.end(), [](const InstanceRecord* a, const InstanceRecord* b) {
    return std::tie(a->launched_ms, a->id) < std::tie(b->launched_ms, b->id);
  });
  for (size_t k = 0; k < old.size() && k < landed.size(); ++k) stopped.push_back(old[k]->id);
  if (auto s = StopWorkers(stopped, type, absl::StrCat("moved to ", to)); !s.ok()) return s;
  const nlohmann::json done = {{"number", number},
                               {"instance_type", type},
                               {"to", to},
                               {"launched", landed},
                               {"stopped", stopped}};
  return Log("zone-return-done", done.dump());
}

absl::Status JobRun::ResumeZoneReturns() {
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  std::map<int, nlohmann::json> unfinished;  // number -> its record
  for (const JobEventRecord& e : *events) {
    if (e.kind != "zone-return" && e.kind != "zone-return-done") continue;
    nlohmann::json doc = nlohmann::json::parse(e.detail, nullptr, false);
    if (!doc.is_object()) {
      return absl::DataLossError(
          absl::StrCat("job ", job_.id, ": a ", e.kind, " event is not readable: ", e.detail));
    }
    const int number = doc.value("number", 0);
    if (e.kind == "zone-return") {
      zone_returns_ = std::max(zone_returns_, number);
      unfinished[number] = doc;
    } else {
      unfinished.erase(number);
    }
  }
  for (const auto& [number, doc] : unfinished) {
    // Logged, then the gateway died: the same launch again (its client tokens make the cloud
    // return what it started then), and the stops.
    if (auto s = Log("warning", absl::StrCat("resuming zone return ", number,
                                             " that a stopped gateway did not finish"));
        !s.ok()) {
      return s;
    }
    if (auto s = CarryOutZoneReturn(number, doc.value("instance_type", ""), doc.value("from", ""),
                                    doc.value("to", ""), doc.value("count", 0),
                                    doc.value("first_index", 0));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::job
