// A synchronous (all-reduce) job's rendezvous and elastic launch (sync_launch.h, rendezvous.h).
#include <filesystem>

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
  std::string host = spec_.elastic.host;
  if (host.empty()) {
    if (!services_.provider->SharesFilesWithCaller()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "elastic.rendezvous.host is required on provider ", services_.provider->name(),
          ": the address at which the instances reach this machine (its port opened to them)"));
    }
    host = "127.0.0.1";  // the local provider's instances share this machine
  }
  // Restarted on the port on record: the running instances' commands name it.
  const int port = last.has_value() ? last->port : spec_.elastic.port;
  RendezvousOptions options;
  const std::string output = services_.provider->OutputLocation();
  options.log_path =
      (std::filesystem::path(output.empty() ? std::filesystem::temp_directory_path().string()
                                            : output) /
       absl::StrCat(job_.id, "-rendezvous.log"))
          .string();
  if (!output.empty()) std::filesystem::create_directories(output);
  auto started = StartRendezvous(job_.id, host, port, options);
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

absl::StatusOr<launcher::ClusterLaunchRequest> JobRun::SyncRequest(
    const std::vector<TypeCount>& launch, int first_index, const std::string& token_prefix,
    const pb::Prediction& prediction, launcher::Market market, int workers) {
  if (!rendezvous_.has_value()) {
    return absl::FailedPreconditionError("a synchronous job launches after its rendezvous starts");
  }
  int planned = 0;
  for (const TypeCount& c : CountsOf(plan_.cluster())) planned += c.count;
  auto cluster = ElasticClusterFor(
      {.job_id = job_.id,
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
       .env = JobEnvironment(job_.id, spec_, options_, *services_.provider, workers)});
  if (!cluster.ok()) return cluster.status();
  return launcher::ElasticClusterRequest(*cluster);
}

}  // namespace spotdnn::job
