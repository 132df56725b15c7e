// The spotDNN training-performance model (paper section III, equations 1-10) for one workload
// profile and one instance catalog: iteration times, cluster speed, WA batch, convergence
// coefficient, normalized iterations to a target loss, time and cost.
#ifndef SPOTDNN_PREDICTOR_PERFORMANCE_MODEL_H_
#define SPOTDNN_PREDICTOR_PERFORMANCE_MODEL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/types.h"

namespace spotdnn::predictor {

// Longest loss curve horizon, in seconds (about 317 years).
inline constexpr double kMaxHorizonS = 1e10;

// Knobs that change predictions without changing the profile.
struct ModelOptions {
  // Predict this fraction less worker bandwidth than eq. 8 gives (the paper over-predicts
  // contention by 1-5% to absorb model error). In [0, 1). In the shared-ps variant: this fraction
  // less parameter-server bandwidth.
  double bandwidth_margin = 0;
  // Create fails without a loss model (g1..g5). Callers that only ask for iteration or sample
  // targets set false; a loss target then fails with FAILED_PRECONDITION (kNoLossModel).
  bool require_loss_model = true;
};

// What the model compiled for one catalog type.
struct TypeModel {
  bool usable = false;
  std::string unusable_reason;      // why not, when !usable
  int gpus = 0;                     // g_i
  int batch_size = 0;               // b_i = g_i * b_k
  double compute_time_s = 0;        // T_comp_i
  double pcie_time_s = 0;           // weighted 2 g S / B_pcie part of T_comm_i
  double single_worker_time_s = 0;  // iteration time alone (measured, or T_i at |N| = 1)
  bool batch_known = true;          // shared-ps: false when no batch size is known (b_i = 0);
                                    // iteration targets still work, sample targets do not
  double spot_price_per_hour = 0;
  double on_demand_price_per_hour = 0;
};

// Why the model gives no estimate for a cluster (kOk when it does).
enum class EstimateError : std::uint8_t {
  kOk,
  kEmptyCluster,          // |N| = 0
  kTooManyWorkers,        // |N| > kMaxClusterSize
  kUnusableType,          // a type with count > 0 has no usable compute profile
  kTargetAtOrBelowFloor,  // target loss <= g5 (or NaN)
  kNotReachable,          // j <= 0: the cluster starts below the target already
  kNotFinite,             // j or T is not finite
  kNoLossModel,           // a loss target, and the profile has no loss model
  kNoBatch,               // a samples target, and a type in the cluster has no batch size
  kNoConvergenceModel,    // a metric target, and the profile has no convergence model of it
  kTargetNotReached,      // a convergence model's runs mostly never reach the target
};

// The cluster-level numbers of a prediction. Filled as far as the model got; read `error` first.
struct Estimate {
  EstimateError error = EstimateError::kOk;
  int unusable_type = -1;                // catalog index, for kUnusableType
  int workers = 0;                       // |N|
  double contention_probability = 0;     // P
  double worker_bandwidth_mb_per_s = 0;  // B_wk (the same for every worker); shared-ps: 2 S / R
  double ps_utilization = 0;             // shared-ps: W, the servers' utilisation
  double ps_response_time_s = 0;         // shared-ps: R, one exchange with the servers
  double cluster_speed = 0;              // v, samples/s
  double expected_iteration_time_s = 0;  // T_exp
  double wa_batch = 0;                   // b_w
  double convergence_coefficient = 0;    // R
  double normalized_iterations = 0;      // j (for a loss or metric target: the p50)
  double time_s = 0;                     // T (the p50's time)
  // The run-to-run spread of a loss or metric target predicted by a convergence model: the 10th,
  // 50th and 90th percentiles of the global steps and of the time (p10 = p50 = p90 otherwise).
  double iterations_p10 = 0, iterations_p50 = 0, iterations_p90 = 0;
  double time_p10_s = 0, time_p50_s = 0, time_p90_s = 0;
  bool has_spread = false;  // the percentiles come from a convergence model's spread
  // A target beyond the best value the convergence model's runs reached (see
  // ConvergenceModel::IsExtrapolation): the prediction is an extrapolation; data_best is that
  // best value, in the target's unit.
  bool extrapolated = false;
  double data_best = 0;
  double price_per_hour = 0;  // spot $/h of workers and parameter servers
  double on_demand_price_per_hour = 0;
  double cost_usd = 0;
  double on_demand_cost_usd = 0;

  bool ok() const { return error == EstimateError::kOk; }
};

// Per-type part of a detailed prediction.
struct WorkerBreakdown {
  int type_index = 0;
  int count = 0;
  int gpus = 0;
  int batch_size = 0;
  double compute_time_s = 0;
  double communication_time_s = 0;
  double iteration_time_s = 0;
  double samples_per_s = 0;
  double bandwidth_mb_per_s = 0;
  // Synchronous: samples per GPU per (micro-)step of this type's ranks (their mean when some have
  // one more than others).
  double local_batch = 0;
};

// A full prediction for one cluster.
struct Prediction {
  Estimate estimate;
  std::vector<WorkerBreakdown> workers;  // one per type with count > 0, in catalog order
  int parameter_servers = 1;
  double target_loss = 0;  // for a loss target
  Target target;
  // Synchronous: micro-steps per step (gradient accumulation; 1 when the global batch fits the
  // cluster's memory). 0 for a parameter-server prediction.
  int accumulation_steps = 0;
  // Synchronous: how the global batch followed the cluster; for a loss or metric target, the
  // convergence model's global batch and critical batch (the critical-batch law scaled its steps,
  // reference_iterations at the p50, to this prediction's global batch).
  GlobalBatch global_batch_mode = GlobalBatch::kFixed;
  double reference_global_batch = 0;
  std::optional<double> critical_batch;
  double reference_iterations = 0;
};

// One point of a loss curve.
struct LossPoint {
  double time_s = 0;
  double normalized_iterations = 0;
  double loss = 0;
};

// The convergence a prediction of a metric target is made with: the model, and the R (eq. 5,
// weighted as the profile's variant weighs it) it is evaluated at. The planner and a running job's
// forecast both take it from here, so that the plan's iterations and the job's first forecast are
// the same number.
struct TargetConvergence {
  ConvergenceModel model;
  double r = 0;
  // What R of eq. 5 is weighted by for this model (r = r_weight x R): the variant's weight for
  // eq. 3, 1 for a fitted eq. 3 form, 0 for the saturating form (R plays no part).
  double r_weight = 0;
  bool eq3 = false;  // the profile's g1..g5 (eq. 3) serve the target, not a fitted model
};

// Which convergence serves `target` (a loss or another metric) for `profile` on a cluster with WA
// batch `wa_batch` and convergence coefficient `convergence_coefficient` (R of eq. 5): a loss
// target stays with eq. 3 when the profile has g1..g5 (g2 b_w + g3 folded into the model's g3);
// every other metric target, and a loss without eq. 3, takes the profile's fitted model of that
// metric. FAILED_PRECONDITION naming the metric and the workload when the profile has neither;
// INVALID_ARGUMENT for a target that is not a loss or metric.
absl::StatusOr<TargetConvergence> ConvergenceForTarget(const WorkloadProfile& profile,
                                                       const Target& target, double wa_batch,
                                                       double convergence_coefficient);

// The model for one workload on one catalog. Immutable after Create; safe to share across threads.
class PerformanceModel {
 public:
  // Validates both inputs and compiles per-type constants. INVALID_ARGUMENT for bad numbers,
  // FAILED_PRECONDITION when the profile lacks what predictions need (loss or contention model,
  // a usable compute time for at least one type).
  static absl::StatusOr<PerformanceModel> Create(WorkloadProfile profile, InstanceCatalog catalog,
                                                 ModelOptions options = {});

  // The hot path: counts indexed like catalog().types (size must match), no allocation.
  // With a finite `current_loss` (> target_loss), j counts only the normalized iterations from
  // that loss to the target on this cluster: j(target) - max(0, j(current)).
  Estimate Evaluate(absl::Span<const int> counts, double target_loss, int parameter_servers = 1,
                    double current_loss = std::numeric_limits<double>::infinity()) const;
  // The same for any target. An iterations or samples target counts from the start (the caller
  // passes what is left); `current_loss` applies to loss targets only.
  Estimate Evaluate(absl::Span<const int> counts, const Target& target, int parameter_servers = 1,
                    double current_loss = std::numeric_limits<double>::infinity()) const;

  // 2 S / B_wk for a cluster of `workers` workers (eq. 8 with the bandwidth margin). In the
  // shared-ps variant, where the time depends on the cluster's composition: the least R any
  // cluster of `workers` workers sees (all of the slowest usable type), a lower bound.
  double NetworkTime(int workers, int parameter_servers = 1) const;
  // True when NetworkTime is every worker's exact communication time at that size (the paper's
  // variants); false when it is only a lower bound (shared-ps).
  bool NetworkTimeIsExact() const { return profile_.variant != ModelVariant::kSharedPs; }

  // Evaluate plus the per-type breakdown; errors become a Status naming the reason.
  absl::StatusOr<Prediction> Predict(const Cluster& cluster, double target_loss) const;
  absl::StatusOr<Prediction> Predict(const Cluster& cluster, const Target& target) const;

  // Predicted loss after `time_s` seconds of training on `cluster`.
  absl::StatusOr<double> LossAtTime(const Cluster& cluster, double time_s) const;

  // `points` (2 to 100,000) evenly spaced points of the predicted loss from time 0 to `horizon_s`
  // (at most kMaxHorizonS).
  absl::StatusOr<std::vector<LossPoint>> LossCurve(const Cluster& cluster, double horizon_s,
                                                   int points) const;

  // The Status that explains a failed Estimate (OK for a good one).
  absl::Status ErrorStatus(const Estimate& estimate, double target_loss) const;
  absl::Status ErrorStatus(const Estimate& estimate, const Target& target) const;

  // FAILED_PRECONDITION naming every type of `counts` the model cannot use ("name (gpu)") and
  // why; `first` is the Estimate's unusable_type, named when no other is found.
  absl::Status UnusableStatus(absl::Span<const int> counts, int first) const;

  // Whether the profile has a loss model (loss targets and curves need one).
  bool has_loss_model() const { return has_loss_; }
  // FAILED_PRECONDITION (as ErrorStatus says it) when the profile cannot predict `target` on any
  // cluster: a loss without a loss model or a convergence model of the loss, or a metric the
  // profile has no convergence model of in that direction. OK for iterations and samples.
  absl::Status CheckTarget(const Target& target) const;
  // The profile's convergence model of `metric` ("loss", "accuracy", ...), or nullptr.
  const ConvergenceModel* ConvergenceOf(absl::string_view metric) const;

  const WorkloadProfile& profile() const { return profile_; }
  const InstanceCatalog& catalog() const { return catalog_; }
  const ModelOptions& options() const { return options_; }
  const VariantCoefficients& coefficients() const { return coefficients_; }
  // One entry per catalog type, in catalog order.
  const std::vector<TypeModel>& types() const { return types_; }

 private:
  PerformanceModel() = default;
  absl::Status CheckCluster(const Cluster& cluster) const;
  // Fills `t` for a shared-ps profile's compute entry (usable, or unusable_reason).
  static void CompileSharedPsType(const PerformanceModel& model, const ComputeProfile& compute,
                                  int batch_per_gpu, const InstanceType& type, TypeModel& t);

  // Fills the parts of `out` that do not depend on the target loss; false on error.
  bool EvaluateShape(absl::Span<const int> counts, int parameter_servers, Estimate& out) const;
  // Shared-ps: false (and kNoBatch) when a type in `counts` has no batch size.
  bool BatchesKnown(absl::Span<const int> counts, Estimate& out) const;
  // The rest of an estimate from its normalized iterations j: time and cost, or the error.
  void Finish(double j, Estimate& out) const;
  // A loss or metric target through the profile's convergence model `m` (from `current`, a
  // value already reached, when finite).
  void EvaluateConvergence(const ConvergenceModel& m, const Target& target, double current,
                           Estimate& out) const;
  // Steps-to-target answers are costly (a Monte Carlo); the model caches them per question.
  struct QuantileCache;
  std::shared_ptr<QuantileCache> cache_;

  WorkloadProfile profile_;
  InstanceCatalog catalog_;
  ModelOptions options_;
  VariantCoefficients coefficients_{};
  ContentionModel contention_;
  LossModel loss_;
  std::vector<TypeModel> types_;
  double two_s_ = 0;  // 2 * S_parm
  bool has_loss_ = false;
  // Shared-ps variant: d = service_per_server_s_ / P, the queueing coefficient, and each type's
  // compute time in catalog order (0 for unusable types, which never have a count).
  bool shared_ps_ = false;
  double service_per_server_s_ = 0;
  double queueing_ = 0;
  std::vector<double> compute_times_;
  double slowest_compute_s_ = 0;  // the largest usable compute time (NetworkTime's bound)
};

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_PERFORMANCE_MODEL_H_
