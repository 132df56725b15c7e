// A job's account, computed from the job store: predicted vs actual time and cost, the instances
// launched, every revocation with the times that measure its handling, and whether the SLO was
// met. A typed value: the CLI renders it as a table or as JSON.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SUMMARY_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SUMMARY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/job_store.h"

namespace spotdnn::job {

// One revocation as the summary shows it. Times are unix ms (0: not yet).
struct RevocationSummary {
  std::string instance;
  RevocationStatus status = RevocationStatus::kPending;
  std::string takeover;   // takeover instance ids, comma-separated
  int64_t notice_ms = 0;  // when the detector saw the notice (else when the gateway got it)
  int64_t received_ms = 0;
  int64_t replanned_ms = 0;
  int64_t takeover_running_ms = 0;
  int64_t takeover_first_report_ms = 0;
  int64_t revoked_instance_ended_ms = 0;
  std::string detail;
  // Derived: seconds from the notice to the takeover running / training, and whether the takeover
  // ran before the revoked instance stopped; absent until known.
  std::optional<double> notice_to_takeover_running_s;
  std::optional<double> notice_to_takeover_training_s;
  std::optional<bool> takeover_before_revoked_ended;
};

// A restart of a synchronous job: an instance went (its notice, its revocation, its loss), every
// rank stopped, and the ranks of the cluster resumed from the last checkpoint. Logged as a
// "restart" event when it starts and a "restarted" one when every running instance steps again.
struct RestartSummary {
  std::string instance;        // the instance that went
  std::string cause;           // the revocation event's kind: notice, revoked, lost
  int64_t notice_ms = 0;       // its notice (else when the gateway learned of it), unix ms
  double steps_at_notice = 0;  // the job's highest step then
  // Once every running instance's ranks step again (absent until then):
  std::optional<double> stepping_s;    // the notice to the last instance's first step after it
  std::optional<double> steps_redone;  // steps computed again: each resume's distance behind the
                                       // furthest step made before it
  int64_t resumed_step = 0;            // the first step after the notice (0: not yet)
};

// A restart as its events' detail keeps it (JSON), and back; DATA_LOSS naming the text.
std::string RestartJson(const RestartSummary& restart);
absl::StatusOr<RestartSummary> ParseRestartJson(const std::string& text);

// A job's restarts from its log, in order: each "restart" event, replaced by its "restarted" one
// (the same instance and notice) once there is one; those without stepping_s are under way.
absl::StatusOr<std::vector<RestartSummary>> RestartsOf(const std::vector<JobEventRecord>& events);

// A job's summary.
struct JobSummary {
  std::string job_id;
  JobState state = JobState::kLaunching;
  std::string message;
  double target_loss = 0;
  double deadline_s = 0;  // 0: none
  double budget_usd = 0;  // 0: none
  // The first plan's prediction, and the current one (after re-plans; equal without them).
  double first_plan_iterations = 0;
  double first_plan_time_s = 0;
  double first_plan_cost_usd = 0;
  double target_iterations = 0;
  double iterations_done = 0;
  // The job's loss as measured: the workers' smoothed loss at the end (or now), how it was
  // smoothed, and each running worker's last raw loss beside it; absent when no worker reported
  // a loss.
  std::optional<double> final_loss;
  std::string loss_smoothing;
  std::vector<std::pair<std::string, double>> worker_last_losses;
  double steps_lost = 0;  // iterations undone by parameter-server takeovers
  double predicted_time_s = 0;
  double predicted_cost_usd = 0;
  double actual_time_s = 0;  // from the launch to the end (or now)
  // The profiling step when it ran inside the job: how long, what it cost (0: none). Counted
  // in the deadline and the budget.
  double profiling_s = 0;
  double profiling_cost_usd = 0;
  double actual_cost_usd = 0;  // every instance from its launch to its stop (profiling too)
  // The instances' hours and cost so far by market (profiling not included): spot, and on-demand
  // that the deadline guard ran while spot could not keep the deadline. Beside them the first
  // plan's cluster on on-demand for its predicted time (what on-demand from the start costs).
  double spot_instance_hours = 0;
  double spot_cost_usd = 0;
  double on_demand_instance_hours = 0;
  double on_demand_cost_usd = 0;
  double on_demand_only_cost_usd = 0;
  int on_demand_instances = 0;
  int deadline_decisions = 0;  // "deadline" events in the job's log
  // Workers launched in another zone than their type's last ("move" events) and what the moves
  // cost (changeovers at the new zone's price, checkpoint copies across regions).
  int moves = 0;
  double move_cost_usd = 0;
  std::vector<std::string> move_list;  // "ZONE -> ZONE (INSTANCE, $COST)"
  int instances_launched = 0;
  int takeover_instances = 0;
  int revocations_handled = 0;  // launched or none-needed
  std::vector<RevocationSummary> revocations;
  // A synchronous job's restarts, in order: the "restarted" record where there is one, else the
  // "restart" one (still under way).
  std::vector<RestartSummary> restarts;
  // With slo.confidence: the plan's simulated probability of meeting the deadline and its 95%
  // interval, beside what happened (deadline_met); absent without.
  double confidence = 0;
  std::optional<double> predicted_p_meet_deadline;
  double predicted_p_meet_deadline_low = 0;
  double predicted_p_meet_deadline_high = 0;
  // The target the job was judged by: its kind ("loss", "iterations", "epochs", or a metric's
  // name), in words ("loss <= 2.6", "6400 global steps", "accuracy >= 0.88"), what was measured
  // to judge it ("the workers' smoothed loss", "global steps done") and its value then, and
  // whether it was reached (absent: not measured, "unknown").
  std::string target_kind;
  std::string target;
  std::string target_measure;
  std::optional<double> target_measured;
  std::optional<bool> target_reached;
  // A loss target only: reached by a measured loss (absent: no loss target, or no loss measured).
  std::optional<bool> loss_reached;
  bool deadline_met = false;
  bool budget_met = false;
  // Absent while unknown: the loss target not measured (and nothing else missed).
  std::optional<bool> slo_met;
  // A job not ended: whether it is on the plan's line (job_outlook.h OnTrack).
  bool on_track = true;
};

// Whether a job may stop: the workers' smoothed loss at or below the target loss when they
// report a loss, else the target iterations (workers that report no loss: the plan's prediction
// is all there is, and the summary says the loss is unknown).
bool TargetReached(const JobRecord& job, const JobSpec& spec);

// The target a job is judged by, as the summary names it (JobSummary::target_*).
struct JudgedTarget {
  std::string kind;
  std::string target;
  std::string measure;
  std::optional<double> measured;
  std::optional<bool> reached;
};
JudgedTarget JudgeTarget(const JobRecord& job, const JobSpec& spec);
// The judged target in a few words, e.g. "the workers' smoothed loss 2.59 <= 2.6",
// "137 of 137 global steps".
std::string TargetDescription(const JobRecord& job, const JobSpec& spec);

// "worker=loss,..." (JobRecord::worker_losses) as pairs.
std::vector<std::pair<std::string, double>> ParseWorkerLosses(const std::string& text);

// The summary of a stored job, with `now_ms` as the end of a job that has not ended.
absl::StatusOr<JobSummary> SummarizeJob(JobStore& store, const std::string& job_id, int64_t now_ms);

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_SUMMARY_H_
