// What the job controller tells its caller, as typed values: one struct per kind of event. The
// CLI renders each as a line for a person or a JSON object; the controller never formats text.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_EVENTS_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_EVENTS_H_

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "services/gateway/job/job_summary.h"
#include "services/gateway/job/job_types.h"

namespace spotdnn::job {

// A count of instances of one type, e.g. a plan's cluster or what a re-plan launches.
struct TypeCount {
  std::string instance_type;
  int count = 0;
};

// A profiling log imported into the profiler, a profiling run launched or done, or the profile
// fitted from them.
struct ProfilingEvent {
  static constexpr char kKind[] = "profiling";
  std::string imported_log;  // set for an import
  std::string run;           // set for a profiling run: its job id
  std::vector<TypeCount> cluster;
  int64_t steps = 0;
  bool run_done = false;       // the run's workers did their steps
  std::string fitted_profile;  // set for the fit
  // With `run`: its progress (a run launched, in progress or done). Steps are every worker's
  // together (steps x workers in all); seconds and cost from the profiling step's start.
  bool in_progress = false;
  int64_t steps_done = 0;
  int64_t steps_total = 0;
  double elapsed_s = 0;
  double cost_usd = 0;
  std::optional<double> eta_s;  // to this run's end at its measured pace
};

// The job is planned and stored.
struct PlannedEvent {
  static constexpr char kKind[] = "planned";
  std::vector<TypeCount> cluster;
  double target_iterations = 0;
  double predicted_time_s = 0;
  double predicted_cost_usd = 0;
  std::string strategy;
  double p_meet_deadline = -1;  // with slo.confidence: the simulated probability (else < 0)
  int64_t simulated_runs = 0;
};

// The plan's instances are launched.
struct LaunchedEvent {
  static constexpr char kKind[] = "launched";
  int instances = 0;
  int parameter_servers = 0;
  int workers = 0;
  std::string provider;
};

// The cloud had no capacity for these types (each with the workers of it running).
struct CapacityEvent {
  static constexpr char kKind[] = "capacity";
  std::vector<TypeCount> running;
};

// A decision of the deadline guard for one instance type: what the deadline policy
// said should run (spot and on-demand), why, and what was launched or stopped for it.
struct DeadlineEvent {
  static constexpr char kKind[] = "deadline";
  std::string instance_type;
  std::string trigger;  // capacity, revocation, behind-plan, probe, check
  std::string reason;   // the policy's
  int spot = 0;         // what should run
  int on_demand = 0;
  int launch_spot = 0;  // what this decision launches and stops
  int launch_on_demand = 0;
  int stop_on_demand = 0;
  double time_left_s = 0;
  double work_left_s = 0;
  // What runs of the type when it is decided, and the on-demand instances kept running beyond
  // the decision's count until spot covers the workers wanted (they are never stopped into a gap).
  int running_spot = 0;
  int running_on_demand = 0;
  int kept_on_demand = 0;
  bool probe = false;  // the spot launch is a probe of capacity: it may be refused
};

// What came of a deadline decision once carried out: the spot launch got capacity or was refused,
// and what runs of the type now.
struct DeadlineDoneEvent {
  static constexpr char kKind[] = "deadline-done";
  std::string instance_type;
  bool probe = false;
  bool spot_refused = false;  // the cloud had no spot capacity for the launch
  int launched_spot = 0;
  int launched_on_demand = 0;
  int stopped_on_demand = 0;
  int running_spot = 0;
  int running_on_demand = 0;
  double next_probe_in_s = 0;  // when spot was refused: the next probe's wait
};

// A re-plan: after a capacity shortfall (no `instance`) or a revocation of `instance`.
struct ReplannedEvent {
  static constexpr char kKind[] = "replanned";
  std::string instance;  // empty: a capacity re-plan
  bool feasible = true;
  std::vector<TypeCount> to_launch;
  double more_iterations = 0;   // revocation: iterations the new cluster still has to do
  double predicted_time_s = 0;  // revocation: of the rest; capacity: of the whole job
  double predicted_cost_usd = 0;
  double remaining_time_s = 0;
  int64_t replan_ms = 0;  // how long the re-plan took, from the notice's arrival
  std::string detail;     // when infeasible: what was done instead (refit: why it re-planned)
  bool refit = false;     // a re-plan after the live convergence refit (no `instance`)
};

// A revocation notice (or a revoked or lost instance) for one of the job's workers.
struct NoticeEvent {
  static constexpr char kKind[] = "notice";
  std::string instance;
  std::string instance_type;
  std::string kind;  // the detector's event kind: notice, revoked, lost
  bool parameter_server = false;
  absl::Time effective = absl::InfinitePast();  // when it goes (InfinitePast: unknown)
};

// The takeover instances for a revocation are running (or none were needed).
struct TakeoverEvent {
  static constexpr char kKind[] = "takeover";
  std::string instance;
  std::vector<std::string> takeover;  // empty: not replaced (`detail` says why)
  int64_t notice_to_running_ms = 0;
  std::string detail;  // the re-plan's note: why not replaced, like for like, ...
};

// A synchronous job's restart is over: every running instance's ranks step again.
struct RestartedEvent {
  static constexpr char kKind[] = "restarted";
  RestartSummary restart;
};

// A takeover could not be launched.
struct TakeoverFailedEvent {
  static constexpr char kKind[] = "error";
  std::string instance;
  std::string error;
};

// One of the job's instances stopped.
struct InstanceEndedEvent {
  static constexpr char kKind[] = "ended";
  std::string instance;
  std::string instance_type;
  std::string command_end;  // how its command ended by itself ("exit status 1"); "" otherwise
};

// Progress, every few seconds.
struct ProgressEvent {
  static constexpr char kKind[] = "progress";
  double elapsed_s = 0;
  double iterations_done = 0;
  double target_iterations = 0;      // of the current plan
  double first_plan_iterations = 0;  // of the first plan
  // The current prediction of the global steps the job needs: the job's forecast (the plan's model,
  // refitted to the job's measurements) when it has one, else the plan's until exceeded, then the
  // measured loss's straight line (0: unknown, the loss does not fall).
  double predicted_iterations = 0;
  // Where predicted_iterations comes from: "forecast" (the job's current forecast), "plan" or
  // "measured loss"; with a forecast, what made it ("profile", "refit", "re-plan") and at which
  // step.
  std::string predicted_by = "plan";
  std::string forecast_source;
  double forecast_step = 0;
  bool forecast_unreachable = false;  // the current forecast does not reach the target
  std::optional<double> loss;         // the workers' reported loss, smoothed
  double target_loss = 0;
  double steps_lost = 0;        // undone by parameter-server takeovers
  double cost_usd = 0;          // so far: the profiling and every instance from its launch
  std::optional<double> eta_s;  // to the predicted end at the measured pace
  int workers_running = 0;
  int workers_revoking = 0;
  std::optional<double> deadline_in_s;
};

// The live refit's prediction of the finish (convergence_watch.h): the first one from the
// profile's model (`prior`), then each refit from the job's own measurements.
struct ForecastEvent {
  static constexpr char kKind[] = "forecast";
  bool prior = false;
  std::string source = "profile";  // ConvergenceForecast::source
  double step = 0;                 // global steps done
  int points = 0;                  // the job's measurements the refit used
  int workers = 0;
  bool reachable = false;
  double iterations_p10 = 0, iterations_p50 = 0, iterations_p90 = 0;  // global steps from 0
  double finish_p10_s = 0, finish_p50_s = 0, finish_p90_s = 0;        // from the job's start
  double first_iterations_p50 = 0;  // the first forecast's (the profile's)
  double deadline_s = 0;            // from the job's start; 0: none
};

// A worker launched in another zone than its type's last one (its checkpoint follows it).
struct MovedEvent {
  static constexpr char kKind[] = "moved";
  std::string instance;
  std::string instance_type;
  std::string from;  // zone
  std::string to;
  bool across_regions = false;
  double cost_usd = 0;  // the changeover at the new zone's price, and the checkpoint's copy
};

// Something worth a person's attention that does not stop the job.
struct WarningEvent {
  static constexpr char kKind[] = "warning";
  std::string instance;  // may be empty
  std::string message;
};

// A gateway took the job up again.
struct ResumedEvent {
  static constexpr char kKind[] = "resumed";
  int instances = 0;
};

// The job finished or failed (its kind is the state's name).
struct EndedEvent {
  JobState state = JobState::kFinished;
  std::string message;
  JobSummary summary;
};

// Any event, with when and for which job.
struct JobEvent {
  absl::Time at;
  std::string job_id;
  std::variant<ProfilingEvent, PlannedEvent, LaunchedEvent, CapacityEvent, ReplannedEvent,
               NoticeEvent, TakeoverEvent, TakeoverFailedEvent, InstanceEndedEvent, ProgressEvent,
               WarningEvent, ResumedEvent, EndedEvent, DeadlineEvent, DeadlineDoneEvent,
               ForecastEvent, RestartedEvent, MovedEvent>
      what;
};

// Where events go.
using JobEventSink = std::function<void(const JobEvent&)>;

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_EVENTS_H_
