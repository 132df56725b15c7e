// A replay simulator of a job on revocable instances: each instance's lifetime is sampled from its
// type's distribution, and every revocation is handled the way the gateway handles it (`spotdnn
// run`, services/gateway/job_runner.cc): at the notice the rest of the job is re-planned with the
// survivors and the progress so far (provisioner::Replan, the same function the provisioner
// serves), the takeover instances it names are launched at once (one of the revoked type, like for
// like, when no plan can meet the SLO any more), and they train once the revocation overhead has
// passed. It reports how often the deadline is met and the distributions of time, cost and
// revocations.
//
// Assumptions (see the README): training is asynchronous against parameter servers that are not
// revoked (the paper's on-demand PS), so the model state survives a worker's revocation and only
// its in-flight step is lost (`lost_iterations_per_revocation`), unless the options say the job is
// synchronous (SynchronousRestart: every rank restarts from the last checkpoint); instances are
// revoked independently of each other; an instance's lifetime starts at its launch; progress
// advances at the model's rate 1/T_exp of the workers training at that moment.
#ifndef SPOTDNN_PROVISIONER_SIMULATOR_H_
#define SPOTDNN_PROVISIONER_SIMULATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "provisioner/plan_model.h"
#include "provisioner/planner.h"
#include "provisioner/replan.h"
#include "provisioner/revocation_model.h"

namespace spotdnn::provisioner {

// Most runs one simulation may make.
inline constexpr int kMaxSimulationRuns = 10'000'000;

// A synchronous job's restart time when neither the options nor the profile give one: the time
// from a revocation notice to every rank stepping again, measured on the DDP example under torchrun
// elastic (the rank's step and checkpoint, torchrun's restart, a rendezvous round, process start
// and checkpoint load; 17-24 s on a 2-core machine, docs/synchronous-runs.md).
inline constexpr double kDefaultRestartS = 20;
// A synchronous job's checkpoint interval when neither the options nor the profile give one.
inline constexpr double kDefaultCheckpointEveryS = 600;

// The revocation cost of a synchronous (all-reduce) job. Every rank stops when one goes: the job
// restarts from its last checkpoint on the survivors (elastic, while at least `min_instances`
// instances are left; fewer wait for a replacement), and a replacement joins at a restart of its
// own. Each restart stops every rank for `restart_s` and redoes what the cluster computed since
// the last checkpoint; the job checkpoints every `checkpoint_every_s` of training (the interval
// starts again at each restart, which resumes from a checkpoint). The ASP in-flight loss
// (`lost_iterations_per_revocation`) does not apply.
struct SynchronousRestart {
  double restart_s = kDefaultRestartS;
  double checkpoint_every_s = kDefaultCheckpointEveryS;
  int min_instances = 1;
  // The training instances' speed is the profile's all-reduce model's (predictor::PredictAllReduce)
  // with `local_batch` samples per GPU when above 0, else with `global_batch` split by speed over
  // the survivors when above 0, else with the profile's global_batch_size when it declares one;
  // else the plan's model's speed.
  int local_batch = 0;
  int global_batch = 0;
};

// The expected training time one restart of a synchronous job costs the whole cluster: the restart
// plus half a checkpoint interval redone (a revocation falls anywhere in the interval). The
// deadline guard charges it for each instance start of a synchronous job.
double ExpectedRestartCostS(const SynchronousRestart& restart);

// How a simulation runs.
struct SimulationOptions {
  int runs = 10'000;
  uint64_t seed = 1;
  // The revocation notice comes this long before the instance goes (AWS: 120 s, GCE: 30 s); the
  // re-plan and the takeover launch happen at the notice. 0: at the revocation itself.
  double notice_s = 0;
  // From the notice (when the takeover is launched) to when the takeover instances train: boot,
  // framework start, first parameters. Unset: the problem's revocation overhead T_ohd, the time
  // the planner budgets for it.
  std::optional<double> takeover_delay_s;
  // Normalized iterations lost when a worker is revoked (its in-flight step).
  double lost_iterations_per_revocation = 1;
  // Set: the job is synchronous and pays SynchronousRestart's cost on each revocation and join.
  std::optional<SynchronousRestart> synchronous;
  // Each run draws the iterations its job needs from the plan's convergence spread (a log-normal
  // through its p10 and p90, when the workload's convergence model gives them): P(meet deadline)
  // then counts slow convergence as well as revocations. false: every run needs the p50.
  bool convergence_spread = true;
  // 0 (default): re-plans get the exact clock and progress, as the gateway's would; equal inputs
  // share one cached re-plan (with empirical lifetimes, revocations fall on the observed times, so
  // most re-plans repeat). Above 0: re-plan decisions see the clock rounded up and the progress
  // rounded down to this fraction of the deadline and of the plan's iterations, so that nearby
  // situations share a re-plan: faster with continuous lifetimes, but the rounding gives the
  // re-plans slack they would not have and biases the probability up when deadlines are tight.
  double replan_resolution = 0;
  // Most re-plans one Simulator may solve (the cache's misses, over all its runs); beyond it a
  // run fails with RESOURCE_EXHAUSTED rather than running for hours.
  uint64_t max_replan_solves = 2'000'000;
  // A run that has not finished by this multiple of the deadline stops there and counts as a miss.
  double horizon_factor = 10;
  // The strategy (and exhaustive limit) of the re-plans; the gateway re-plans with the job's.
  Strategy strategy = Strategy::kExact;
  uint64_t exhaustive_limit = kDefaultExhaustiveLimit;
  // Exact re-plans with the same survivors share a SearchMemo (the parts of the search's bounds
  // that do not depend on the clock or the progress). The answers are the same either way; false
  // searches from scratch every time (slower; for comparisons).
  bool reuse_search = true;
};

// OK when the options are usable; INVALID_ARGUMENT naming the field (simulation.runs, ...).
absl::Status ValidateSimulationOptions(const SimulationOptions& options);

// Mean and percentiles (nearest rank) of one quantity over the runs.
struct Summary {
  double mean = 0, p50 = 0, p90 = 0, min = 0, max = 0;
  double stddev = 0;  // sample standard deviation
};

// Wilson's 95% score interval of a proportion k/n.
void WilsonInterval(int k, int n, double* low, double* high);

struct SimulationResult {
  int runs = 0;
  uint64_t seed = 0;
  int met_deadline = 0;
  double p_meet_deadline = 0;
  double p_meet_deadline_low = 0;  // Wilson 95% interval of the Monte Carlo estimate
  double p_meet_deadline_high = 0;
  double p_meet_slo = 0;       // deadline and budget
  double p_no_revocation = 0;  // runs without any revocation
  Summary time_s;              // job time (to the target loss, or the horizon)
  Summary cost_usd;            // every instance from launch to its end, and the parameter servers
  Summary revocations;         // per run
  int unfinished = 0;          // runs stopped at the horizon
  // A synchronous job's restarts per run and the training it redid: cluster seconds of training
  // since the last checkpoint, and the normalized iterations (steps) they had computed.
  bool synchronous = false;
  SynchronousRestart restart;  // the cost used, when synchronous
  Summary restarts;
  Summary redone_s;
  Summary redone_iterations;
  uint64_t replans = 0;         // re-plans asked for
  uint64_t replans_solved = 0;  // of which solved (the rest came from the cache)
  int replan_errors = 0;        // re-plans the provisioner refused (no takeover, as in the gateway)
  double plan_time_s = 0;       // the plan's predicted time without revocations
  double plan_cost_usd = 0;
};

// Simulates plans of one problem (SLO, quotas, overhead, prices). Keeps a cache of re-plans across
// Run calls. Not thread-safe; `model` must outlive it.
class Simulator {
 public:
  // INVALID_ARGUMENT for a bad problem or options, a revocation model of another catalog, or a
  // problem without a finite deadline (or with a current loss: simulations start from scratch).
  static absl::StatusOr<std::unique_ptr<Simulator>> Create(const PerformanceModel& model,
                                                           PlanProblem problem,
                                                           RevocationModel revocations,
                                                           SimulationOptions options);
  // The same for any plan model (`model` must outlive it). A synchronous model's job always pays
  // SynchronousRestart's cost (the options' or the default one), and its speed and re-plans are
  // the model's own.
  static absl::StatusOr<std::unique_ptr<Simulator>> Create(const PlanModel& model,
                                                           PlanProblem problem,
                                                           RevocationModel revocations,
                                                           SimulationOptions options);

  // Simulates the cluster `plan` (counts indexed like the catalog: the whole cluster the job
  // starts with, running instances included) with the options' runs and seed, or the given ones.
  // INVALID_ARGUMENT when the plan is outside the quotas or the model cannot predict it. The
  // problem's stop check, when it has one, is polled every few runs and when a re-plan fails: a
  // non-OK status ends the simulation and is returned (a caller's deadline).
  absl::StatusOr<SimulationResult> Run(absl::Span<const int> plan);
  absl::StatusOr<SimulationResult> Run(absl::Span<const int> plan, int runs, uint64_t seed);

  const SimulationOptions& options() const { return options_; }
  const PlanProblem& problem() const { return problem_; }
  const RevocationModel& revocations() const { return revocations_; }

 private:
  struct Decision {
    bool error = false;
    bool feasible = false;
    std::vector<int> to_launch;
    double rest_iterations = 0;
  };
  struct Key {
    std::vector<int> survivors, before;
    int64_t clock = 0, progress = 0;
    int64_t step = 0;  // the progress step's bits: it depends on the plan simulated
    bool operator==(const Key& o) const {
      return clock == o.clock && progress == o.progress && step == o.step &&
             survivors == o.survivors && before == o.before;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };

  Simulator(const PlanModel& model, std::unique_ptr<PlanModel> owned, PlanProblem problem,
            RevocationModel revocations, SimulationOptions options)
      : owned_(std::move(owned)),
        model_(model),
        problem_(std::move(problem)),
        revocations_(std::move(revocations)),
        options_(options) {}
  const Decision& Replan(const std::vector<int>& survivors, const std::vector<int>& before,
                         double elapsed_s, double iterations_done, double plan_iterations,
                         double* clock_used, double* progress_used, bool* solved);

  std::unique_ptr<PlanModel> owned_;  // the parameter-server adapter Create made, if any
  const PlanModel& model_;
  PlanProblem problem_;
  RevocationModel revocations_;
  SimulationOptions options_;
  std::unordered_map<Key, Decision, KeyHash> cache_;
  std::map<std::vector<int>, std::unique_ptr<SearchMemo>> memos_;  // by survivors
  uint64_t solves_ = 0;
  absl::Status stopped_;  // what the problem's stop check said during a re-plan of this Run
};

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_SIMULATOR_H_
