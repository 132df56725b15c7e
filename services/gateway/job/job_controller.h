// Runs a job end to end: plan (provisioner), launch (a CloudProvider), watch (detector), track
// progress (profiler), and on a revocation notice re-plan with the survivors and the progress so
// far and launch the takeover instances while the revoked one still runs. Every decision goes to
// the JobStore before it is acted on, so RunJob picks a job up where a killed gateway left it:
// launches are re-issued with the client token they were first made with, which the cloud
// deduplicates, so nothing is launched twice.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_RUNNER_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_RUNNER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/launcher/cloud_provider.h"
#include "services/common/data_registry.h"
#include "services/gateway/job_spec.h"
#include "services/gateway/job_store.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// What happened, for a progress display or a stream of JSON events.
struct JobUpdate {
  std::string kind;  // planned, launched, progress, notice, replanned, takeover, ended, finished,
                     // failed
  std::string line;  // for a person
  std::string json;  // one JSON object
};

struct RunnerEnv {
  pb::Provisioner::StubInterface* provisioner = nullptr;
  pb::Profiler::StubInterface* profiler = nullptr;
  pb::Detector::StubInterface* detector = nullptr;
  launcher::CloudProvider* provider = nullptr;
  JobStore* store = nullptr;
  // Given to every instance: SPOTDNN_PROFILER (where workers report their steps) and
  // SPOTDNN_DETECTOR (where an agent reports heartbeats).
  std::string profiler_address;
  std::string detector_address;
  std::function<void(const JobUpdate&)> on_update;
  absl::Duration tick = absl::Milliseconds(250);
  absl::Duration progress_every = absl::Seconds(2);
  // The job fails when its workers report no new iteration for this long while running (a worker
  // command that does not report, or a profiler nobody reaches); zero: never.
  absl::Duration stall_timeout = absl::Minutes(10);
  // Where the instances' output is kept, for the failure messages (local provider); may be empty.
  std::string instance_logs;
};

// Stores a new job: resolves its workload (running its profiling step first when it has one) and
// catalog, asks the provisioner for the plan and stores it (state "launching"). ALREADY_EXISTS
// when the job is stored; FAILED_PRECONDITION (with the fastest time) when no plan meets the SLO.
// `spec_json` is the job spec document (see job_spec.h); it is stored with the job.
absl::StatusOr<JobRecord> PlanJob(const std::string& spec_json, RunnerEnv& env,
                                  const services::DataRegistry& local);

// Runs a stored job from wherever it is until it finishes or fails, and returns its final record
// (summary_json set). A job already finished or failed is returned as it is.
absl::StatusOr<JobRecord> RunJob(const std::string& job_id, RunnerEnv& env);

// The job's summary from the store: predicted vs actual time and cost, revocations handled (with
// notice-to-takeover times), instances launched, SLO met. One JSON object.
absl::StatusOr<std::string> JobSummaryJson(JobStore& store, const std::string& job_id);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_RUNNER_H_
