// The rules that end a running job, each a small pure object that JobRun::Loop asks once a tick
// (in this order): the target is reached (finish), the outlook is hopeless (give up for the
// loss), no iteration for too long (give up: stalled), no worker left and no takeover pending
// (give up). None reads a clock or does I/O: the loop hands each the measurements it needs, so
// each is tested on its own (tests/gateway/stop_rules_test.cc). The outlook's estimate itself is
// job_outlook.h's.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_STOP_RULES_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_STOP_RULES_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/gateway/job/convergence_watch.h"
#include "services/gateway/job/job_outlook.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/job_store.h"

namespace spotdnn::job {

// What a stop rule says about the job now.
struct StopDecision {
  enum class Kind {
    kGoOn,    // the job runs on
    kFinish,  // the job reached its target: it ends well
    kGiveUp,  // the job cannot go on: it fails with `why`
  };
  Kind kind = Kind::kGoOn;
  std::string why;  // for kGiveUp: the job's failure message

  // The job runs on.
  static StopDecision GoOn() { return {}; }
  // The job ends well.
  static StopDecision Finish() { return {.kind = Kind::kFinish}; }
  // The job fails with `why`.
  static StopDecision GiveUp(std::string why) {
    return {.kind = Kind::kGiveUp, .why = std::move(why)};
  }
  // Whether the job ends (either way).
  bool Stops() const { return kind != Kind::kGoOn; }
};

// Finishes the job once TargetReached (job_summary.h): the smoothed loss at or below the target
// loss when the workers report a loss, else the target iterations done.
class TargetRule {
 public:
  // The decision for `job` as it stands, asked `spec`.
  StopDecision Check(const JobRecord& job, const JobSpec& spec) const;
};

// Gives the job up for its loss when even the best current estimate misses the deadline
// (Outlook::hopeless, job_outlook.h); the message says what the user can do.
class OutlookRule {
 public:
  // The decision for the job's current outlook.
  StopDecision Check(const Outlook& outlook) const;
};

// Gives a job with a forecast (convergence_watch.h) up for its target, as the last resort. It stops
// only when all of these hold:
//  - the job's current forecast, on the cluster running, finishes past the deadline even at its
//    best case (the p10 finish; "never" when the model does not reach the target);
//  - a re-plan was asked since the forecast turned late, and it could not help (no cluster within
//    the quotas that adds workers, or the model reaches the target on none);
//  - the measured loss agrees: even the optimistic straight line through its recent fall
//    (Outlook::hopeless, job_outlook.h) misses the deadline, so a young refit that extrapolates
//    a few measurements far cannot end a job on its own;
//  - no parameter-server restore is under way (its flat loss is not a stall).
// Past the deadline with the target not reached the job stops as well. The message says what the
// forecast said, what the re-plan tried and why it could not help.
struct ForecastStopInputs {
  const ConvergenceForecast* forecast = nullptr;  // the current one; null: none yet
  double deadline_s = 0;                          // from the job's start; 0: none
  double elapsed_s = 0;
  bool restoring = false;
  // The last re-plan asked because the forecast was late: whether it helped, and what it found.
  bool replanned = false;
  bool replan_helped = false;
  double replan_at_s = 0;
  std::string replan_outcome;
  const Outlook* outlook = nullptr;  // the measured loss's best case
};
class ForecastRule {
 public:
  StopDecision Check(const ForecastStopInputs& in) const;
};

// Gives the job up when no worker has reported a new iteration for `timeout` (a zero or negative
// timeout: never). Keeps the last count of iterations and when it last grew.
class StallRule {
 public:
  // Starts watching at `now` with `iterations` done; `where` ends the failure message (where
  // the instances' output is, or empty).
  StallRule(absl::Duration timeout, double iterations, absl::Time now, std::string where);

  // The decision at `now` with `iterations_done` of `target_iterations`: an advance restarts the
  // timeout.
  StopDecision Check(double iterations_done, double target_iterations, absl::Time now);

 private:
  absl::Duration timeout_;
  double last_iterations_;
  absl::Time last_advance_;
  std::string where_;
};

// How a worker's command ended by itself (the provider's launcher::CommandEnd, with its instance).
struct WorkerExit {
  std::string instance;
  int status = 0;                       // the shell's: the exit status, or 128 + the signal
  std::string how;                      // "exit status 1"
  std::vector<std::string> last_lines;  // its last lines of output, oldest first
};

// "The command on INSTANCE ended with HOW; its last lines:\n  LINE\n  ..." (the lines part only
// when it has some).
std::string FailedCommandText(const WorkerExit& exit);

// Gives the job up when no worker is left running and no takeover is pending: nothing will
// train it any further.
class WorkersLeftRule {
 public:
  // `worker_command` (the spec's) and `where` (as StallRule's) go into the failure message.
  WorkersLeftRule(std::string worker_command, std::string where);

  // The decision with `live_workers` workers running and `takeover_pending` (a revocation whose
  // takeover has not launched yet). `last_exit`, the last worker command that ended by itself
  // (null: none did), goes into the message with its last lines when it failed.
  StopDecision Check(size_t live_workers, bool takeover_pending,
                     const WorkerExit* last_exit = nullptr) const;

 private:
  std::string worker_command_;
  std::string where_;
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_STOP_RULES_H_
