// The job controller: runs a job end to end. It plans (provisioner), launches through a
// CloudProvider (parameter servers first, one launch path: launcher::LaunchCluster), registers
// the instances with the detector and follows its revocation events, tracks the workers' progress
// (profiler), and on a revocation notice re-plans with the survivors and the progress so far and
// launches the takeover instances while the revoked one still runs. A type the cloud has no
// capacity for is re-planned around. Every decision goes to the JobStore before it is acted on,
// so a controller picks a job up where a killed one left it: launches are re-issued with the
// client token they were first made with, which the cloud deduplicates, so nothing is launched
// twice.
//
// It reads time from an injected Clock and reports typed JobEvents; it prints nothing.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_CONTROLLER_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_CONTROLLER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "provisioner/launcher/checkpoint_sync.h"
#include "provisioner/launcher/cloud_provider.h"
#include "services/clients/service_clients.h"
#include "services/common/data_registry.h"
#include "services/gateway/job/deadline_guard.h"
#include "services/gateway/job/job_events.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/job_store.h"
#include "services/gateway/job/job_summary.h"
#include "services/gateway/job/revocation_feed.h"

namespace spotdnn::job {

// What a job runs against. Not owned.
struct JobServices {
  const clients::ProvisionerClient* provisioner = nullptr;
  const clients::ProfilerClient* profiler = nullptr;
  // Null: no detector (the job sees no revocations).
  const clients::DetectorClient* detector = nullptr;
  launcher::CloudProvider* provider = nullptr;
  JobStore* store = nullptr;
  base::Clock* clock = nullptr;  // null: the wall clock
  // Opens a job's revocation feed after a detector sequence number. Default: a DetectorFeed over
  // `detector` (none without a detector).
  std::function<std::unique_ptr<RevocationFeed>(const std::string& job_id, uint64_t after)>
      open_feed;
  // Reads file `name` of a job's checkpoint folder at `uri` (s3://...; NOT_FOUND when absent),
  // for jobs whose spec names one. The local provider's checkpoints are read from the folder.
  std::function<absl::StatusOr<std::string>(const std::string& uri, const std::string& name)>
      read_checkpoint;
  // Copies a job's checkpoint folder to another region's (specs whose checkpoint URI has
  // "{region}"): launcher::MakeS3CheckpointCopier on a cloud.
  launcher::CheckpointCopier copy_checkpoint;
};

// How a job runs.
struct JobOptions {
  // Given to every instance: SPOTDNN_PROFILER (where workers report their steps) and
  // SPOTDNN_DETECTOR (where an agent reports notices and heartbeats).
  std::string profiler_address;
  std::string detector_address;
  absl::Duration tick = absl::Milliseconds(250);
  absl::Duration progress_every = absl::Seconds(2);
  absl::Duration describe_every = absl::Seconds(1);  // how often the provider is asked
  // The job fails when its workers report no new iteration for this long while running (a
  // worker command that does not report, or a profiler nobody reaches); zero: never.
  absl::Duration stall_timeout = absl::Minutes(10);
  // Where a provider whose instances share this machine's files keeps parameter-server
  // checkpoints (a folder per job); spotdnn run: DATA_DIR/checkpoints.
  std::string checkpoint_root;
  // How long a profiling run may take before the job fails.
  absl::Duration profiling_timeout = absl::Minutes(30);
  // The deadline guard's probing and checks (a job spec with fallback "on-demand" and a deadline).
  GuardOptions guard;
};

// A job that ended (or was found ended).
struct JobOutcome {
  JobRecord record;
  JobSummary summary;
};

class JobController {
 public:
  JobController(JobServices services, JobOptions options, JobEventSink sink);

  // Stores a new job: resolves its workload (running its profiling step first when it has one;
  // a name is the profiler's stored profile, else a built-in or file from `local`) and catalog,
  // asks the provisioner for the plan and stores it (state launching). ALREADY_EXISTS when the
  // job is stored; FAILED_PRECONDITION (with the fastest time) when no plan meets the SLO.
  // `spec_json` is the job spec document (job_spec.h); it is stored with the job.
  absl::StatusOr<JobRecord> Plan(const std::string& spec_json, const services::DataRegistry& local);

  // Runs a stored job from wherever it is until it finishes or fails. A job already ended is
  // returned as it is. CANCELLED when Detach() was called (the instances run on; resume later).
  absl::StatusOr<JobOutcome> Run(const std::string& job_id);

  // Makes a Run in progress return at its next tick, leaving the job as it is.
  void Detach() { detach_.store(true); }

 private:
  JobServices services_;
  JobOptions options_;
  JobEventSink sink_;
  base::RealClock real_clock_;
  std::atomic<bool> detach_{false};
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_CONTROLLER_H_
