// The gateway's job state, in SQLite or PostgreSQL (base/db): each job's spec, plan and
// progress; every instance it launched (and why); every revocation it handled, with the times that
// measure the handling; and a log of what happened. `spotdnn run --resume` rebuilds a job from here
// after the gateway died, so every decision is written before it is acted on (launch intents carry
// the client token the cloud deduplicates on).
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_STORE_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/db/database.h"  // db::HeldLock, which HoldJob returns
#include "provisioner/launcher/cloud_provider.h"
#include "services/gateway/job/job_types.h"

namespace spotdnn::job {

// A job as stored: its spec, what it resolved and planned, and its progress.
struct JobRecord {
  std::string id;
  std::string spec_json;  // the job spec as given
  JobState state = JobState::kLaunching;
  std::string message;  // why it failed
  int64_t created_ms = 0;
  int64_t started_ms = 0;        // when the plan's instances were launched
  int64_t finished_ms = 0;       // when it reached the target (or failed)
  std::string workload_json;     // the resolved WorkloadProfile (protobuf JSON)
  std::string catalog_json;      // the resolved InstanceCatalog (protobuf JSON)
  std::string plan_json;         // the first Plan (protobuf JSON)
  double target_iterations = 0;  // normalized iterations to reach the target (current plan)
  double predicted_time_s = 0;   // of the current plan, from the job's start
  double predicted_cost_usd = 0;
  double iterations_done = 0;  // the job's global iterations (the workers' steps, minus lost ones)
  double loss = 0;             // the workers' reported loss, smoothed (0: none reported)
  double steps_lost = 0;       // iterations undone by parameter-server takeovers
  int64_t last_event_seq = 0;  // the detector's last event handled
  std::string ps_addresses;    // comma-separated host:port
  int next_worker_index = 0;
  int takeovers = 0;  // takeover launches so far (numbers their client tokens)
  // The running workers' last raw losses at the last poll, "worker=loss,..." (empty: none).
  std::string worker_losses;
  // The job's profiling step, when it ran inside the job: its start (unix ms), how long it took
  // and what its instances cost (0: none, or not yet).
  int64_t profiling_started_ms = 0;
  double profiling_s = 0;
  double profiling_cost_usd = 0;
};

// An instance the job launched.
struct InstanceRecord {
  std::string job_id;
  std::string id;
  launcher::Role role = launcher::Role::kWorker;
  std::string instance_type;
  int index = 0;
  LaunchReason reason = LaunchReason::kPlan;
  std::string launch_token;
  double price_per_hour = 0;
  double predicted_iteration_s = 0;
  std::string metadata_endpoint;  // where the detector polls it (empty: its agent reports)
  std::string metadata_cloud;     // "aws", "gce", "azure": how its notices read
  // Spot, or on-demand (launched by the deadline guard when spot could not keep the deadline).
  launcher::Market market = launcher::Market::kSpot;
  InstanceStatus state = InstanceStatus::kRunning;
  int64_t launched_ms = 0;
  int64_t ended_ms = 0;
  std::string zone;  // where it runs, where the provider says (empty: not said)
};

// One revocation notice the gateway acted on. Times are unix ms; 0 = not yet.
struct RevocationRecord {
  std::string job_id;
  std::string instance_id;
  std::string kind;                  // the detector's event kind ("notice", "revoked", "lost")
  int64_t cloud_notice_ms = 0;       // when the detector saw the notice
  int64_t effective_ms = 0;          // when the cloud said the instance goes
  int64_t received_ms = 0;           // when the gateway got the event
  int64_t replanned_ms = 0;          // when the re-plan answered
  std::string replan_json;           // the ReplanResponse (protobuf JSON)
  std::string takeover_token;        // the client token key of the takeover launch
  std::string takeover_ids;          // comma-separated
  int takeover_first_index = 0;      // worker index of the first takeover instance
  int64_t takeover_launched_ms = 0;  // when the takeover instances were running
  // When the first takeover worker's first step reached the profiler.
  int64_t takeover_reported_ms = 0;
  int64_t ended_ms = 0;  // when the revoked instance stopped
  RevocationStatus status = RevocationStatus::kPending;
  std::string detail;
};

// One point of a job's actual training curve.
struct ProgressRecord {
  int64_t at_ms = 0;
  double iterations = 0;
  double loss = 0;  // 0: none reported
};

struct JobEventRecord {
  int64_t at_ms = 0;
  std::string kind;
  std::string detail;
};

// Thread-safe. Several processes may open the same store (SQLite locking and WAL, or PostgreSQL).
class JobStore {
 public:
  // Opens (creating or migrating its schema) the store at `spec`: a file (PATH or sqlite:PATH, its
  // folder created too) or a postgres://… URI (see db::ParseStoreSpec). INVALID_ARGUMENT for a
  // bad spec; UNAVAILABLE naming it when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& spec);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Holds job `id` for this gateway until the returned lock is destroyed or the process dies: one
  // gateway runs a job at a time (db::Database::TryHoldLock: an advisory lock on PostgreSQL, so
  // across hosts; a file lock beside a SQLite store). `holder` says who this gateway is
  // ("pid 42 on host-a"). FAILED_PRECONDITION naming the job and the holding gateway when another
  // holds it; UNAVAILABLE when the store cannot be asked.
  absl::StatusOr<std::unique_ptr<db::HeldLock>> HoldJob(const std::string& id,
                                                        const std::string& holder);

  // Who holds job `id`'s lock now: the holding gateway's name ("pid 42 on host-a"; may be empty
  // when the store cannot say), or nullopt when no gateway holds it (the lock is taken and let go
  // at once to find out). UNAVAILABLE when the store cannot be asked.
  absl::StatusOr<std::optional<std::string>> JobHolder(const std::string& id);

  // ALREADY_EXISTS when a job with the id is stored.
  absl::Status CreateJob(const JobRecord& job);
  // NOT_FOUND naming the job.
  absl::StatusOr<JobRecord> GetJob(const std::string& id);
  absl::StatusOr<std::vector<JobRecord>> ListJobs();
  // Writes every field of a stored job. NOT_FOUND when it is not stored.
  absl::Status UpdateJob(const JobRecord& job);

  // Inserts or replaces (by job and id).
  absl::Status PutInstance(const InstanceRecord& instance);
  absl::StatusOr<std::vector<InstanceRecord>> Instances(const std::string& job_id);
  // Inserts or replaces (by job and instance).
  absl::Status PutRevocation(const RevocationRecord& revocation);
  absl::StatusOr<std::vector<RevocationRecord>> Revocations(const std::string& job_id);

  // Appends to the job's log (at `at_ms`, unix ms).
  absl::Status AddEvent(const std::string& job_id, const std::string& kind,
                        const std::string& detail, int64_t at_ms);
  absl::StatusOr<std::vector<JobEventRecord>> Events(const std::string& job_id);

  // Appends a point of the job's training curve; its points, oldest first.
  absl::Status AddProgress(const std::string& job_id, const ProgressRecord& point);
  absl::StatusOr<std::vector<ProgressRecord>> Progress(const std::string& job_id);

 private:
  explicit JobStore(std::unique_ptr<db::Database> db);

  absl::Mutex mu_;
  std::unique_ptr<db::Database> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_STORE_H_
