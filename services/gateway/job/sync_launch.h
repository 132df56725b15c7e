// A synchronous (all-reduce) job's launch: the plan's instances as an elastic cluster
// (launcher/elastic_launch.h) whose every instance runs torchrun around the user's script, meeting
// at the job's rendezvous, with the plan's split of the global batch in their environment.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_SYNC_LAUNCH_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_SYNC_LAUNCH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/launcher/cloud_provider.h"
#include "provisioner/launcher/elastic_launch.h"
#include "services/gateway/job/job_events.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/rendezvous.h"
#include "spotdnn/v1/common.pb.h"
#include "spotdnn/v1/profiler.pb.h"

namespace spotdnn::job {

// What one launch of a synchronous job's instances needs.
struct SyncLaunchInput {
  std::string job_id;
  const JobSpec* spec = nullptr;
  const spotdnn::v1::WorkloadProfile* workload = nullptr;  // its global_batch_size
  const spotdnn::v1::InstanceCatalog* catalog = nullptr;   // each type's GPUs
  const spotdnn::v1::Prediction* prediction = nullptr;     // each type's local batch
  std::vector<TypeCount> launch;                           // in launch order
  int first_index = 0;
  std::string token_prefix;
  std::string rendezvous;  // HOST:PORT
  int max_instances = 1;   // the planned count: --nnodes' MAX
  launcher::Market market = launcher::Market::kSpot;
  std::map<std::string, std::string> env;  // the job's environment (JobEnvironment)
};

// The elastic cluster of `input`: each type's ranks per instance (its GPUs), local batch (the
// prediction's mean for the type, rounded, at least 1; 0 when the prediction has none), the
// global batch (the spec's, else the profile's) and the prediction's accumulation steps; MIN the
// spec's elastic.min_instances (1 when unset, at most MAX). INVALID_ARGUMENT naming the field.
absl::StatusOr<launcher::ElasticCluster> ElasticClusterFor(const SyncLaunchInput& input);

// Each instance type's ranks per instance in `catalog`: its GPUs, at least 1 (a CPU type).
std::map<std::string, int> RanksPerInstance(const spotdnn::v1::InstanceCatalog& catalog);

// Where the instances reach a synchronous job's rendezvous: elastic.rendezvous.host, else
// 127.0.0.1 on a provider whose instances run on this machine; INVALID_ARGUMENT naming the field on
// a cloud without one.
absl::StatusOr<std::string> RendezvousHost(const JobSpec& spec,
                                           const launcher::CloudProvider& provider);

// The store's options for `job_id`: its output in the provider's output folder (made), else in
// the temporary folder.
RendezvousOptions RendezvousOptionsFor(const std::string& job_id,
                                       const launcher::CloudProvider& provider);

// Closes `restart` once every instance in `ranks` (a running instance's id -> its ranks) reports
// from at least that many rank streams begun at or after the notice. A stream is a worker id
// the script starts anew on every start of a rank, "INSTANCE-rankL..." (the example:
// "INSTANCE-rankL-startT"), so that the steps a restarted rank computes again are stored, not
// taken for resends. Then: stepping_s is the notice to the latest of the instances' first steps
// after it; steps_redone sums, over the resumes after the notice (streams by their first step,
// in the order they began), how far each resumed behind the furthest step made before it;
// resumed_step is the first resume's first step. Returns whether it closed (false: unchanged).
bool CloseSyncRestart(const spotdnn::v1::GetJobProgressResponse& progress,
                      const std::map<std::string, int>& ranks, RestartSummary& restart);

// Whether a synchronous job's worker command runs a torchrun script: the first argument ending
// in ".py" (a path relative to the current folder, or absolute), when that file is readable here,
// must set up torch.distributed (init_process_group or init_device_mesh) or use a library that
// does (Lightning, Accelerate, DeepSpeed); without it every rank trains alone and the instances'
// steps never meet. INVALID_ARGUMENT naming the script and the way out (elastic.check_script
// false, for a script that initialises in a module it imports) otherwise; OK when the command
// names no readable script (it is on the instances' image, not here).
absl::Status CheckTorchrunScript(const std::string& worker_command);

// A synchronous job's global steps done: the highest step any rank reported (every rank reports
// every step, numbered from the start of the job through restarts), not their sum (which counts a
// step once per rank, as the parameter-server job's progress does).
double SyncStepsDone(const spotdnn::v1::GetJobProgressResponse& progress);

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_SYNC_LAUNCH_H_
