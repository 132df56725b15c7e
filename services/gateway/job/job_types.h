// The job controller's vocabulary: the states of a job, of its instances and of its revocations,
// and why an instance was launched. Each enum has a name (what the job store and the CLI show)
// and a parser of that name. (The clock the controller reads is base::Clock, injected so that
// tests run a whole job in simulated time.)
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_TYPES_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_TYPES_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::job {

// A job's life: stored and planned (launching: its instances are being started), running, then
// finished (it reached its target) or failed (it cannot go on; its message says why).
// Profiling: the job's profiling step runs (before its plan); the job is stored from its start.
enum class JobState { kLaunching, kRunning, kFinished, kFailed, kProfiling };

// An instance as the job sees it: running, revoking (a notice is out; it still runs) or ended.
enum class InstanceStatus { kRunning, kRevoking, kEnded };

// Why an instance was launched: the plan, a capacity re-plan, a takeover after a revocation, a
// decision of the deadline guard (on-demand while spot cannot keep the deadline, spot again), or
// a larger cluster after the live convergence refit predicted a missed deadline (kRefit).
enum class LaunchReason { kPlan, kCapacity, kTakeover, kDeadline, kRefit, kZoneReturn };

// A revocation's handling: pending (re-plan and launch to do), launched (takeover running),
// none-needed (the re-plan kept the survivors), failed (the takeover could not be launched).
enum class RevocationStatus { kPending, kLaunched, kNoneNeeded, kFailed };

absl::string_view Name(JobState state);
absl::string_view Name(InstanceStatus status);
absl::string_view Name(LaunchReason reason);
absl::string_view Name(RevocationStatus status);

// The value of a name above; DATA_LOSS naming `what` for any other text (a damaged job store).
absl::StatusOr<JobState> ParseJobState(absl::string_view name);
absl::StatusOr<InstanceStatus> ParseInstanceStatus(absl::string_view name);
absl::StatusOr<LaunchReason> ParseLaunchReason(absl::string_view name);
absl::StatusOr<RevocationStatus> ParseRevocationStatus(absl::string_view name);

// True for the states a job does not leave.
inline bool IsDone(JobState state) {
  return state == JobState::kFinished || state == JobState::kFailed;
}

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_TYPES_H_
