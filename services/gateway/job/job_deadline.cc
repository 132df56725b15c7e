// The deadline guard's side of the job: what it is told (spot short, spot back), the decisions it
// makes each tick, carried out and logged, and their replay when a gateway resumes the job.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "provisioner/simulator.h"
#include "services/gateway/job/job_run.h"

namespace spotdnn::job {

using launcher::Market;

int JobRun::RunningOn(const std::string& type, Market market) const {
  int n = 0;
  for (const auto& [id, i] : instances_) {
    n += i.role == launcher::Role::kWorker && i.instance_type == type && i.market == market &&
         i.state == InstanceStatus::kRunning;
  }
  return n;
}

bool JobRun::GuardHandles(const std::string& type) const {
  if (guard_ == nullptr) return false;
  auto price = on_demand_price_.find(type);
  return price != on_demand_price_.end() && price->second > 0;
}

absl::Status JobRun::StartGuard() {
  if (spec_.fallback != "on-demand" || spec_.deadline_s <= 0) return absl::OkStatus();
  auto guard = DeadlineGuard::Create(spec_.deadline_policy, options_.guard);
  if (!guard.ok()) {
    return absl::Status(guard.status().code(),
                        absl::StrCat("deadline_policy: ", guard.status().message()));
  }
  guard_ = *std::move(guard);
  // A resumed gateway: the guard's state and the decisions not carried out, from the log.
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  std::map<int, nlohmann::json> unfinished;  // decision number -> its record
  for (const JobEventRecord& e : *events) {
    if (e.kind != "deadline" && e.kind != "deadline-done" && e.kind != "spot-short" &&
        e.kind != "spot-back") {
      continue;
    }
    // Not const: operator[] on a missing key gives null here.
    nlohmann::json doc = nlohmann::json::parse(e.detail, nullptr, false);
    if (!doc.is_object()) {
      return absl::DataLossError(
          absl::StrCat("job ", job_.id, ": a ", e.kind, " event is not readable: ", e.detail));
    }
    const std::string type = doc.value("instance_type", "");
    if (e.kind == "deadline") {
      deadline_decisions_ = std::max(deadline_decisions_, doc.value("number", 0));
      unfinished[doc.value("number", 0)] = doc;
    } else if (e.kind == "deadline-done") {
      unfinished.erase(doc.value("number", 0));
    } else if (e.kind == "spot-short") {
      guard_->OnSpotShort(type, doc.value("wanted", 0), doc.value("spot_running", 0),
                          absl::FromUnixMillis(e.at_ms));
    } else {
      guard_->OnSpotLaunched(type);
    }
  }
  for (auto& [number, doc] : unfinished) {
    // Logged, then the gateway died: the same launches again (their client tokens make the cloud
    // return what it started then), and the stops.
    if (auto s = Log("warning", absl::StrCat("resuming deadline decision ", number,
                                             " that a stopped gateway did not finish"));
        !s.ok()) {
      return s;
    }
    if (auto s = CarryOut(number, doc.value("instance_type", ""), doc.value("launch_spot", 0),
                          doc.value("launch_on_demand", 0), doc.value("stop_on_demand", 0),
                          doc.value("first_index", 0), doc.value("probe", false));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status JobRun::SpotShort(const std::string& type, int wanted) {
  const int spot_running = RunningOn(type, Market::kSpot);
  const nlohmann::json record = {
      {"instance_type", type}, {"wanted", wanted}, {"spot_running", spot_running}};
  // Logged first: a resumed gateway rebuilds the guard from these.
  if (auto s = Log("spot-short", record.dump()); !s.ok()) return s;
  guard_->OnSpotShort(type, wanted, spot_running, clock_.Now());
  return absl::OkStatus();
}

double JobRun::WorkLeftS() const {
  const double plan_iterations = plan_.prediction().normalized_iterations();
  return plan_iterations > 0 ? std::max(0.0, job_.target_iterations - job_.iterations_done) *
                                   plan_.time_s() / plan_iterations
                             : 0;
}

absl::Status JobRun::GuardTick() {
  if (guard_ == nullptr || job_.started_ms == 0 || job_.state != JobState::kRunning) {
    return absl::OkStatus();
  }
  const double elapsed_s = (NowMs() - job_.started_ms) / 1000.0;
  GuardNow now{.now = clock_.Now(),
               .elapsed_s = elapsed_s,
               .time_left_s = spec_.deadline_s - job_.profiling_s - elapsed_s,
               .changeover_s = spec_.revocation_overhead_s};
  if (workload_.sync() == pb::SYNC_KIND_ALLREDUCE) {
    // A synchronous job: each start of an instance also restarts every rank from the last
    // checkpoint (the profile's restart and checkpoint interval, else the simulator's defaults).
    provisioner::SynchronousRestart restart;
    if (workload_.has_restart_s()) restart.restart_s = workload_.restart_s();
    if (workload_.has_checkpoint_every_s()) {
      restart.checkpoint_every_s = workload_.checkpoint_every_s();
    }
    now.changeover_s += provisioner::ExpectedRestartCostS(restart);
  }
  // The plan's pace with its whole cluster: the work left in seconds, and its line.
  now.work_left_s = WorkLeftS();
  if (job_.predicted_time_s > 0 && elapsed_s > 0.1 * job_.predicted_time_s) {
    const double line = job_.target_iterations * std::min(1.0, elapsed_s / job_.predicted_time_s);
    now.behind = job_.iterations_done < (1 - options_.guard.behind_tolerance) * line;
  }
  for (const pb::InstanceCount& c : plan_.cluster().instances()) {
    if (c.count() > 0) now.types[c.instance_type()];
  }
  for (const auto& [id, i] : instances_) {
    if (i.role != launcher::Role::kWorker || i.state != InstanceStatus::kRunning) continue;
    GuardTypeNow& t = now.types[i.instance_type];
    (i.market == Market::kOnDemand ? t.running_on_demand : t.running_spot) += 1;
  }
  for (auto& [type, t] : now.types) {
    t.spot_price_per_hour = spot_price_[type];
    t.on_demand_price_per_hour = on_demand_price_[type];
  }
  for (const GuardAction& a : guard_->Tick(now)) {
    if (!GuardHandles(a.instance_type)) continue;  // no on-demand price: nothing to fall back to
    const int number = ++deadline_decisions_;
    const int first_index = job_.next_worker_index;
    job_.next_worker_index += a.launch_spot + a.launch_on_demand;
    if (auto s = Save(); !s.ok()) return s;
    const nlohmann::json record = {{"number", number},
                                   {"instance_type", a.instance_type},
                                   {"trigger", a.trigger},
                                   {"reason", a.decision.reason},
                                   {"spot", a.decision.spot},
                                   {"on_demand", a.decision.on_demand},
                                   {"running_spot", a.input.running_spot},
                                   {"running_on_demand", a.input.running_on_demand},
                                   {"spot_available", a.input.spot_available},
                                   {"time_left_s", a.input.time_left_s},
                                   {"work_left_s", a.input.work_left_s},
                                   {"launch_spot", a.launch_spot},
                                   {"launch_on_demand", a.launch_on_demand},
                                   {"stop_on_demand", a.stop_on_demand},
                                   {"probe", a.probe},
                                   {"first_index", first_index}};
    // Written before acting on it: a resumed gateway carries out what was not done.
    if (auto s = Log("deadline", record.dump()); !s.ok()) return s;
    Emit(DeadlineEvent{.instance_type = a.instance_type,
                       .trigger = a.trigger,
                       .reason = a.decision.reason,
                       .spot = a.decision.spot,
                       .on_demand = a.decision.on_demand,
                       .launch_spot = a.launch_spot,
                       .launch_on_demand = a.launch_on_demand,
                       .stop_on_demand = a.stop_on_demand,
                       .time_left_s = a.input.time_left_s,
                       .work_left_s = a.input.work_left_s,
                       .running_spot = a.input.running_spot,
                       .running_on_demand = a.input.running_on_demand,
                       .kept_on_demand = std::max(
                           0, a.input.running_on_demand - a.stop_on_demand - a.decision.on_demand),
                       .probe = a.probe});
    if (auto s = CarryOut(number, a.instance_type, a.launch_spot, a.launch_on_demand,
                          a.stop_on_demand, first_index, a.probe);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status JobRun::CarryOut(int number, const std::string& type, int launch_spot,
                              int launch_on_demand, int stop_on_demand, int first_index,
                              bool probe) {
  const std::string prefix = absl::StrCat(job_.id, "-deadline-", number, "-");
  std::vector<std::string> launched_ids, stopped_ids;
  // A launch that fails for another reason than capacity is a warning: the guard asks again at
  // its next check and decides afresh.
  auto warn = [&](const absl::Status& error) -> absl::Status {
    const std::string message =
        absl::StrCat("deadline decision ", number, " for ", type, ": ", error.message());
    Emit(WarningEvent{.message = message});
    return Log("warning", message);
  };
  bool spot_ok = true;
  if (launch_spot > 0) {
    auto launched = Launch({{type, launch_spot}}, first_index, prefix, plan_.prediction(),
                           LaunchReason::kDeadline, /*with_servers=*/false, {}, Market::kSpot);
    if (launched.ok()) {
      for (const launcher::Instance& i : launched->instances) launched_ids.push_back(i.id);
    }
    const bool short_of_spot =
        !launched.ok() ? absl::IsResourceExhausted(launched.status())
                       : !launched->exhausted_types.empty() || !launched->shortfall.empty();
    if (short_of_spot) {
      spot_ok = false;
      const int wanted = std::max(guard_->Wanted(type), RunningOn(type, Market::kSpot));
      if (auto s = SpotShort(type, wanted); !s.ok()) return s;
    } else if (!launched.ok() || !launched->error.ok()) {
      spot_ok = false;
      if (auto s = warn(launched.ok() ? launched->error : launched.status()); !s.ok()) return s;
    } else {
      // Spot is back: the guard forgets the shortage (and its backoff).
      const nlohmann::json record = {{"instance_type", type}};
      if (auto s = Log("spot-back", record.dump()); !s.ok()) return s;
      guard_->OnSpotLaunched(type);
    }
  }
  if (launch_on_demand > 0) {
    auto launched =
        Launch({{type, launch_on_demand}}, first_index + launch_spot, prefix, plan_.prediction(),
               LaunchReason::kDeadline, /*with_servers=*/false, {}, Market::kOnDemand);
    if (launched.ok()) {
      for (const launcher::Instance& i : launched->instances) launched_ids.push_back(i.id);
    }
    const absl::Status error = launched.ok() ? launched->error : launched.status();
    if (!error.ok()) {
      if (auto s = warn(error); !s.ok()) return s;
    }
  }
  if (stop_on_demand > 0 && spot_ok) {
    // The newest on-demand workers of the type go (the spot ones that replace them run).
    std::vector<InstanceRecord*> on_demand;
    for (auto& [id, i] : instances_) {
      if (i.role == launcher::Role::kWorker && i.instance_type == type &&
          i.market == Market::kOnDemand && i.state == InstanceStatus::kRunning) {
        on_demand.push_back(&i);
      }
    }
    std::sort(on_demand.begin(), on_demand.end(),
              [](const InstanceRecord* a, const InstanceRecord* b) {
                return std::tie(a->launched_ms, a->id) > std::tie(b->launched_ms, b->id);
              });
    for (size_t k = 0; k < on_demand.size() && k < static_cast<size_t>(stop_on_demand); ++k) {
      stopped_ids.push_back(on_demand[k]->id);
    }
    if (auto s = StopWorkers(stopped_ids, type, "on-demand, back to spot"); !s.ok()) return s;
  }
  const nlohmann::json done = {{"number", number},
                               {"instance_type", type},
                               {"launched", launched_ids},
                               {"stopped", stopped_ids}};
  if (auto s = Log("deadline-done", done.dump()); !s.ok()) return s;
  // What came of it, in the words of what runs now: a refused probe is not "spot is back".
  const absl::Time next_probe = guard_->NextProbe(type);
  Emit(DeadlineDoneEvent{.instance_type = type,
                         .probe = probe,
                         .spot_refused = launch_spot > 0 && !spot_ok,
                         .launched_spot = spot_ok ? launch_spot : 0,
                         .launched_on_demand = launch_on_demand,
                         .stopped_on_demand = static_cast<int>(stopped_ids.size()),
                         .running_spot = RunningOn(type, Market::kSpot),
                         .running_on_demand = RunningOn(type, Market::kOnDemand),
                         .next_probe_in_s = next_probe > clock_.Now()
                                                ? absl::ToDoubleSeconds(next_probe - clock_.Now())
                                                : 0});
  return absl::OkStatus();
}

}  // namespace spotdnn::job
