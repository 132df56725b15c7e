#include "services/gateway/job/sync_launch.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/common/data_registry.h"

namespace spotdnn::job {

absl::StatusOr<launcher::ElasticCluster> ElasticClusterFor(const SyncLaunchInput& input) {
  if (input.spec == nullptr || input.workload == nullptr || input.catalog == nullptr ||
      input.prediction == nullptr) {
    return absl::InvalidArgumentError(
        "a synchronous launch needs the spec, profile, catalog and "
        "prediction");
  }
  const JobSpec& spec = *input.spec;
  const std::map<std::string, int> gpus = RanksPerInstance(*input.catalog);
  std::map<std::string, double> local_batch;
  for (const spotdnn::v1::WorkerPrediction& w : input.prediction->workers()) {
    local_batch[w.instance_type()] = w.local_batch();
  }
  const int max_instances = std::max(1, input.max_instances);
  launcher::ElasticCluster cluster{
      .launch = {.job_id = input.job_id,
                 .rendezvous = input.rendezvous,
                 .min_instances = std::clamp(spec.elastic.min_instances, 1, max_instances),
                 .max_instances = max_instances,
                 .max_restarts = spec.elastic.max_restarts,
                 .join_timeout_s = static_cast<int>(std::ceil(spec.elastic.join_timeout_s)),
                 .script = spec.worker_command},
      .global_batch =
          spec.global_batch > 0 ? spec.global_batch : input.workload->global_batch_size(),
      .accumulation_steps = std::max(1, input.prediction->accumulation_steps()),
      .worker_token_prefix = input.token_prefix,
      .extra_env = input.env};
  int index = input.first_index;
  for (const TypeCount& c : input.launch) {
    auto g = gpus.find(c.instance_type);
    if (g == gpus.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance type \"", c.instance_type, "\" is not in the job's catalog"));
    }
    auto b = local_batch.find(c.instance_type);
    const int batch = b == local_batch.end() || b->second <= 0
                          ? 0
                          : std::max(1, static_cast<int>(std::lround(b->second)));
    cluster.groups.push_back({.instance_type = c.instance_type,
                              .count = c.count,
                              .first_index = index,
                              .procs_per_instance = g->second,
                              .local_batch = batch,
                              .market = input.market});
    index += c.count;
  }
  return cluster;
}

std::map<std::string, int> RanksPerInstance(const spotdnn::v1::InstanceCatalog& catalog) {
  std::map<std::string, int> ranks;
  for (const spotdnn::v1::InstanceType& t : catalog.instance_types()) {
    ranks[t.name()] = std::max(1, t.gpus());
  }
  return ranks;
}

absl::StatusOr<std::string> RendezvousHost(const JobSpec& spec,
                                           const launcher::CloudProvider& provider) {
  if (!spec.elastic.host.empty()) return spec.elastic.host;
  if (provider.SharesFilesWithCaller()) return std::string("127.0.0.1");
  return absl::InvalidArgumentError(absl::StrCat(
      "elastic.rendezvous.host is required on provider ", provider.name(),
      ": the address at which the instances reach this machine (its port opened to them)"));
}

RendezvousOptions RendezvousOptionsFor(const std::string& job_id,
                                       const launcher::CloudProvider& provider) {
  RendezvousOptions options;
  const std::string output = provider.OutputLocation();
  std::error_code ignored;
  if (!output.empty()) std::filesystem::create_directories(output, ignored);
  options.log_path =
      (std::filesystem::path(output.empty() ? std::filesystem::temp_directory_path().string()
                                            : output) /
       absl::StrCat(job_id, "-rendezvous.log"))
          .string();
  return options;
}

bool CloseSyncRestart(const spotdnn::v1::GetJobProgressResponse& progress,
                      const std::map<std::string, int>& ranks, RestartSummary& restart) {
  if (ranks.empty()) return false;
  const double notice_s = restart.notice_ms / 1000.0;
  // The streams begun since the notice, and the furthest step of those begun before it.
  std::vector<const spotdnn::v1::WorkerProgress*> since;
  double furthest = restart.steps_at_notice;
  for (const spotdnn::v1::WorkerProgress& w : progress.workers()) {
    if (w.first_wall_time_s() >= notice_s && w.first_step() > 0) {
      since.push_back(&w);
    } else {
      furthest = std::max(furthest, static_cast<double>(w.steps()));
    }
  }
  double last_start_s = notice_s;
  for (const auto& [instance, count] : ranks) {
    // Its ranks all step once `count` of its streams have begun: the count-th earliest start.
    const std::string prefix = absl::StrCat(instance, "-rank");
    std::vector<double> starts;
    for (const spotdnn::v1::WorkerProgress* w : since) {
      if (absl::StartsWith(w->worker_id(), prefix)) starts.push_back(w->first_wall_time_s());
    }
    const size_t needed = static_cast<size_t>(std::max(1, count));
    if (starts.size() < needed) return false;
    std::sort(starts.begin(), starts.end());
    last_start_s = std::max(last_start_s, starts[needed - 1]);
  }
  // The resumes in the order they began: a group restarts together, from one checkpoint, so its
  // streams share their first step.
  std::sort(since.begin(), since.end(), [](const auto* a, const auto* b) {
    return a->first_wall_time_s() < b->first_wall_time_s();
  });
  double redone = 0;
  int64_t resumed = 0;
  std::set<int64_t> resumes;
  for (const spotdnn::v1::WorkerProgress* w : since) {
    if (resumed == 0) resumed = w->first_step();
    if (resumes.insert(w->first_step()).second) {
      redone += std::max(0.0, furthest - static_cast<double>(w->first_step() - 1));
    }
    furthest = std::max(furthest, static_cast<double>(w->steps()));
  }
  restart.stepping_s = last_start_s - notice_s;
  restart.steps_redone = redone;
  restart.resumed_step = resumed;
  return true;
}

double SyncStepsDone(const spotdnn::v1::GetJobProgressResponse& progress) {
  int64_t steps = 0;
  for (const spotdnn::v1::WorkerProgress& w : progress.workers()) {
    steps = std::max(steps, w.steps());
  }
  return static_cast<double>(steps);
}

absl::Status CheckTorchrunScript(const std::string& worker_command) {
  // The words as the elastic launch reads them (a command it cannot run is refused there).
  auto words = launcher::SplitCommandWords("commands.worker", worker_command);
  if (!words.ok()) return absl::OkStatus();
  auto script = std::find_if(words->begin(), words->end(),
                             [](const std::string& w) { return absl::EndsWith(w, ".py"); });
  if (script == words->end()) return absl::OkStatus();
  auto source = services::ReadFile(*script);
  if (!source.ok()) return absl::OkStatus();  // not here: on the instances' image
  for (const char* marker :
       {"init_process_group", "init_device_mesh", "lightning", "accelerate", "deepspeed"}) {
    if (absl::StrContains(*source, marker)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "commands.worker: ", *script,
      " is not a torchrun script: it never calls torch.distributed.init_process_group (nor uses "
      "Lightning, Accelerate or DeepSpeed, which do), so under torchrun each rank would train "
      "alone and a synchronous job's steps would never meet. Initialise the process group "
      "(deploy/examples/digits-ddp/train.py shows how), or, if the script initialises it in a "
      "module it imports, set \"elastic\": {\"check_script\": false}"));
}

}  // namespace spotdnn::job
