// A job for `spotdnn run`: what to train (a stored or built-in workload profile, or logs to
// profile first), the SLO, the catalog, the cloud, quotas and the commands the instances run.
// Documented with an example in deploy/examples/job.json.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SPEC_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SPEC_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/launcher/provider_factory.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::job {

// A short run made to profile a workload before planning it.
struct ProfilingRun {
  std::map<std::string, int> cluster;  // workers per instance type
  int64_t steps = 0;                   // each worker's steps (SPOTDNN_MAX_STEPS)
};

// A job spec, parsed and checked.
// Where a job may run, when its catalog lists zones.
struct ZoneSpec {
  std::string zone;                // only this zone (a synchronous job: all its instances)
  std::string region;              // only this region's zones
  std::vector<std::string> avoid;  // never these zones
  // The checkpoint's size, for what a move across regions costs; < 0: the workload's parameter
  // size.
  double checkpoint_mb = -1;
};

struct JobSpec {
  std::string name;  // the job id: 1-64 of [A-Za-z0-9._-]
  // The workload profile: a name (the profiler's stored profiles first, then the built-ins) or a
  // JSON file.
  std::string workload;
  // Optional profiling step: these logs are imported into the profiler and fitted into the
  // profile `workload` names before planning (`profiling_base` supplies what they cannot tell).
  std::vector<std::string> profiling_logs;
  // Short runs made first (the job's own commands, on its provider), their samples fitted too.
  std::vector<ProfilingRun> profiling_runs;
  std::string profiling_base;
  double profiling_ps_bandwidth = 0;  // B_ps of the runs (MB/s), for the contention fit
  std::string catalog;                // a name or a JSON file
  double target_loss = 0;             // the target: a loss, or (0 here) ...
  double target_iterations = 0;       // ... global iterations (steps of all workers), or ...
  double target_epochs = 0;           // ... epochs of
  double dataset_size = 0;            // this many samples, or ...
  // ... a metric's value (slo.accuracy, slo.target "accuracy>=0.88"; a loss target given so is
  // target_loss).
  std::optional<spotdnn::v1::MetricTarget> target_metric;
  double deadline_s = 0;  // 0: none (then budget_usd is required)
  double budget_usd = 0;  // 0: none
  spotdnn::v1::PlanStrategy strategy = spotdnn::v1::PLAN_STRATEGY_EXACT;
  // The cloud and its settings (checked by launcher::ValidateProviderSpec).
  launcher::ProviderSpec provider;
  std::map<std::string, int> quotas;  // per-type overrides
  int parameter_servers = 1;
  std::string worker_command;
  std::string ps_command;  // default: the worker command (SPOTDNN_ROLE tells them apart)
  double revocation_overhead_s = 0;
  // When spot capacity runs out mid-job (a takeover the cloud has no spot capacity for, or
  // progress behind the plan): "on-demand" (the default with a deadline) asks the deadline
  // policy `deadline_policy` (provisioner/deadline) what to run on on-demand until spot returns;
  // "none": the job fails as before.
  std::string fallback = "on-demand";
  std::string deadline_policy = "ours";
  // slo.confidence: plan the cheapest cluster that meets the deadline with this probability
  // (0: the plain plan) under the revocation model of slo.lifetimes (a lifetime CSV), else the
  // catalog's lifetimes or interruption rates; slo.notice and slo.takeover_delay time the
  // simulated takeovers (default 0 and the revocation overhead).
  double confidence = 0;
  std::string lifetimes;
  double notice_s = 0;
  double takeover_delay_s = -1;  // < 0: the revocation overhead
  // Where checkpoints go on a cloud (s3://BUCKET/PREFIX; the job's folder is PREFIX/JOB). Empty:
  // the local provider's DATA_DIR/checkpoints/JOB. "{region}" in it names a bucket (or prefix) per
  // region: an instance uses its region's, and a move to another region copies the checkpoint
  // there once (CheckpointUriIn).
  std::string checkpoint_uri;
  ZoneSpec zones;  // where it may run (catalogs with zones)

  // How the job trains: "allreduce" (synchronous data parallelism: the worker command is a
  // torchrun script, there is no parameter-server role), "ps" (asynchronous parameter servers),
  // or empty: the workload profile's kind (ResolveSync).
  std::string sync;
  // A synchronous job's samples per step over every rank (0: the profile's global_batch_size).
  int global_batch = 0;
  // The synchronous job's elastic launcher (spec field "elastic"; elastic_launch.h).
  struct Elastic {
    int min_instances = 0;  // --nnodes=MIN:MAX's MIN; 0: 1
    int max_restarts = 3;   // torchrun's --max_restarts
    // How long a rendezvous waits for MIN instances before torchrun gives up (join_timeout).
    double join_timeout_s = 120;
    // The job's rendezvous store, on the control side: the address the instances reach it at
    // (empty: 127.0.0.1, the local provider's) and its port (0: a free one, chosen when it first
    // starts and kept on restarts). torch 1.13's TCPStore listens on every interface whatever
    // the address: the network rules decide who reaches it (docs/synchronous-runs.md).
    std::string host;
    int port = 0;
    // Whether `spotdnn run` checks that the worker's script sets up torch.distributed
    // (CheckTorchrunScript in sync_launch.h) before the job starts.
    bool check_script = true;
  } elastic;
  bool has_elastic = false;            // the spec had an "elastic" object
  bool has_ps_command = false;         // the spec had commands.parameter_server
  bool has_parameter_servers = false;  // the spec had parameter_servers

  // True when the spec has a profiling step (logs to import or runs to make).
  bool HasProfiling() const { return !profiling_logs.empty() || !profiling_runs.empty(); }
};

// Parses a job spec document. INVALID_ARGUMENT naming the field and the value.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& json);

// The job's sync kind: the spec's "sync" when it has one, else the profile's (`profile_sync`).
// INVALID_ARGUMENT naming the field when a synchronous job has a parameter-server command or
// count, or a parameter-server job an "elastic" section.
absl::StatusOr<spotdnn::v1::SyncKind> ResolveSync(const JobSpec& spec,
                                                  spotdnn::v1::SyncKind profile_sync);

// Writes the spec's target into an SLO: target_loss, target_iterations, target_epochs and
// dataset_size, or target_metric.
void SetSloTarget(const JobSpec& spec, spotdnn::v1::Slo* slo);

// Reads and parses a job spec file (NOT_FOUND naming the path when it cannot be read).
absl::StatusOr<JobSpec> ReadJobSpec(const std::string& path);

// The spec's checkpoint folder of job `job_id` for instances in `region` ("{region}" replaced;
// empty when the spec names no checkpoint URI).
std::string CheckpointUriIn(const JobSpec& spec, const std::string& job_id,
                            const std::string& region);
// Whether the spec keeps a checkpoint bucket (or prefix) per region.
bool CheckpointsPerRegion(const JobSpec& spec);

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SPEC_H_
