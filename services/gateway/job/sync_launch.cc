#include "services/gateway/job/sync_launch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace spotdnn::job {

absl::StatusOr<launcher::ElasticCluster> ElasticClusterFor(const SyncLaunchInput& input) {
  if (input.spec == nullptr || input.workload == nullptr || input.catalog == nullptr ||
      input.prediction == nullptr) {
    return absl::InvalidArgumentError(
        "a synchronous launch needs the spec, profile, catalog and "
        "prediction");
  }
  const JobSpec& spec = *input.spec;
  std::map<std::string, int> gpus;
  for (const spotdnn::v1::InstanceType& t : input.catalog->instance_types()) {
    gpus[t.name()] = std::max(1, t.gpus());
  }
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

double SyncStepsDone(const spotdnn::v1::GetJobProgressResponse& progress) {
  int64_t steps = 0;
  for (const spotdnn::v1::WorkerProgress& w : progress.workers()) {
    steps = std::max(steps, w.steps());
  }
  return static_cast<double>(steps);
}

}  // namespace spotdnn::job
