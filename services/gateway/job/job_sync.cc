// A synchronous (all-reduce) job's rendezvous and elastic launch (sync_launch.h, rendezvous.h).
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/gateway/job/job_run.h"
#include "services/gateway/job/sync_launch.h"

namespace spotdnn::job {
namespace {

// A "rendezvous" event's detail: the record, and how it came to be (started, adopted,
// restarted, stopped).
std::string RendezvousDetail(const RendezvousRecord& record, const std::string& how) {
  nlohmann::json doc = nlohmann::json::parse(RendezvousJson(record));
  doc["how"] = how;
  return doc.dump();
}

}  // namespace

absl::Status JobRun::EnsureRendezvous() {
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  std::optional<RendezvousRecord> last;
  bool stopped = false;
  for (const JobEventRecord& e : *events) {
    if (e.kind != "rendezvous") continue;
    auto record = ParseRendezvousJson(e.detail);
    if (!record.ok()) return record.status();
    last = *record;
    stopped = nlohmann::json::parse(e.detail, nullptr, false).value("how", "") == "stopped";
  }
  if (last.has_value() && !stopped && RendezvousAlive(job_.id, *last)) {
    rendezvous_ = *last;
    return Log("rendezvous", RendezvousDetail(*last, "adopted"));
  }
  auto host = RendezvousHost(spec_, *services_.provider);
  if (!host.ok()) return host.status();
  // Restarted on the port on record: the running instances' commands name it.
  const int port = last.has_value() ? last->port : spec_.elastic.port;
  auto started =
      StartRendezvous(job_.id, *host, port, RendezvousOptionsFor(job_.id, *services_.provider));
  if (!started.ok()) return started.status();
  rendezvous_ = *started;
  return Log("rendezvous", RendezvousDetail(*started, last.has_value() ? "restarted" : "started"));
}

absl::Status JobRun::StopJobRendezvous() {
  if (!rendezvous_.has_value()) return absl::OkStatus();
  if (absl::Status s = StopRendezvous(job_.id, *rendezvous_); !s.ok()) return s;
  const RendezvousRecord stopped = *rendezvous_;
  rendezvous_.reset();
  return Log("rendezvous", RendezvousDetail(stopped, "stopped"));
}

absl::Status JobRun::LoadRestarts() {
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  auto restarts = RestartsOf(*events);
  if (!restarts.ok()) return restarts.status();
  open_restarts_.clear();
  for (RestartSummary& r : *restarts) {
    if (!r.stepping_s.has_value()) open_restarts_.push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status JobRun::CloseRestarts(const pb::GetJobProgressResponse& progress) {
  if (open_restarts_.empty()) return absl::OkStatus();
  const std::map<std::string, int> gpus = RanksPerInstance(catalog_);
  std::map<std::string, int> ranks;  // every running worker instance's
  for (const auto& [id, i] : instances_) {
    if (i.role != launcher::Role::kWorker || i.state != InstanceStatus::kRunning) continue;
    auto g = gpus.find(i.instance_type);
    ranks[id] = g == gpus.end() ? 1 : g->second;
  }
  for (auto it = open_restarts_.begin(); it != open_restarts_.end();) {
    if (!CloseSyncRestart(progress, ranks, *it)) {
      ++it;
      continue;
    }
    if (auto s = Log("restarted", RestartJson(*it)); !s.ok()) return s;
    Emit(RestartedEvent{.restart = *it});
    it = open_restarts_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<launcher::ClusterLaunchRequest> JobRun::SyncRequest(
    const std::vector<TypeCount>& launch, int first_index, const std::string& token_prefix,
    const pb::Prediction& prediction, launcher::Market market, int workers) {
  if (!rendezvous_.has_value()) {
    return absl::FailedPreconditionError("a synchronous job launches after its rendezvous starts");
  }
  int planned = 0;
  for (const TypeCount& c : CountsOf(plan_.cluster())) planned += c.count;
  auto cluster =
      ElasticClusterFor({.job_id = job_.id,
                         .spec = &spec_,
                         .workload = &workload_,
                         .catalog = &catalog_,
                         .prediction = &prediction,
                         .launch = launch,
                         .first_index = first_index,
                         .token_prefix = token_prefix,
                         .rendezvous = rendezvous_->Endpoint(),
                         .max_instances = std::max(planned, workers),
                         .market = market,
                         .env = JobEnvironment(job_.id, spec_, options_, *services_.provider,
                                               workers, CheckpointRegion())});
  if (!cluster.ok()) return cluster.status();
  return launcher::ElasticClusterRequest(*cluster);
}

}  // namespace spotdnn::job
