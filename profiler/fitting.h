// Fitting the performance model's workload parameters from Samples (paper section III): S_parm,
// B_req, T_comp per instance or GPU type, memory-to-batch a2/b2 (eq. 10), contention a1/b1
// (eqs. 8-9), loss coefficients g1..g5 (eq. 3), each on its own (fitting.cc), and the whole
// workload with its model variant (FitWorkload, fit_variants.cc). The cluster-speed curve and its
// validation are in speed_curve.h. Non-linear least squares is Ceres Solver's, with a Cauchy loss
// so that stalls and outliers in the samples do not drag the fit.
#ifndef SPOTDNN_PROFILER_FITTING_H_
#define SPOTDNN_PROFILER_FITTING_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/types.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// How well a fitted parameter explains the data it was fitted on.
struct FitQuality {
  std::string parameter{};  // "S_parm", "B_req", "T_comp[p3.2xlarge]", "a1,b1", "a2,b2", "g1..g5"
  bool identified = false;  // false: the data do not determine it; `note` says what is missing
  double rmse = 0;          // root-mean-square residual, in the fitted quantity's unit
  double r_squared = 0;     // 1 - SS_res / SS_tot (0 when the data do not vary)
  double mape = 0;          // mean absolute percentage error of the fitted values, %
  int points = 0;           // observations used
  std::string note{};
  bool worse_than_mean = false;  // R^2 < 0: set (with a note) by NoteWorseThanMean
};

// One fitted parameter's value and spread: its standard error (1 sigma), from the fit's Jacobian
// at the optimum and the residuals' variance.
struct ParameterSpread {
  std::string parameter{};  // "allreduce[T4].b_c"
  double value = 0;
  double sd = 0;
};

// One configuration a fit explains badly: what it measured and what the fitted model gives.
struct FitResidual {
  std::string parameter{};      // the fit it belongs to, "allreduce[T4]"
  std::string configuration{};  // "4,4" (the GPUs on each instance)
  double local_batch = 0;
  double measured_s = 0;
  double fitted_s = 0;
  double error_pct = 0;  // (fitted - measured) / measured, %
};

// Most residuals a fit reports as its worst.
inline constexpr int kWorstResiduals = 5;

// True when a fitted row explains its data worse than their mean would (R^2 < 0): the model's
// predictions are then not worth using as they are.
bool WorseThanMean(const FitQuality& q);
// Marks every such row (worse_than_mean) and starts its note with "worse than the data's mean
// (R^2 = -0.31 < 0): ".
void NoteWorseThanMean(std::vector<FitQuality>& rows);

// Residual statistics of `predicted` against `observed`.
FitQuality Quality(std::string parameter, absl::Span<const double> observed,
                   absl::Span<const double> predicted);

// Values the fit takes as given (0 = unknown, fit it from the samples where possible).
struct KnownParameters {
  double parameter_size_mb = 0;            // S_parm
  double required_bandwidth_mb_per_s = 0;  // B_req
  double ps_bandwidth_mb_per_s = 0;        // B_ps of the parameter server(s) the runs used
  double pcie_bandwidth_mb_per_s = 10000;  // B_pcie
  // The variant to fit; unset: shared-ps when runs at several sizes identify it and the paper's
  // contention a1, b1 is not identified, else paper.
  std::optional<predictor::ModelVariant> variant{};
  // Convergence models a base profile declares: their schedules (and forms) are the fit's.
  std::vector<predictor::ConvergenceModel> declared_convergence{};
};

// Eq. 8-9 contention fitted from multi-worker runs.
struct ContentionFit {
  predictor::ContentionModel contention;
  FitQuality quality;
};

// S_parm (MB) as the median of (bytes_sent + bytes_received) / 2 per iteration.
// FAILED_PRECONDITION when no sample reports bytes.
absl::StatusOr<double> FitParameterSize(absl::Span<const Sample> samples, FitQuality* quality);

// B_req (MB/s) = 2 S_parm / median communication time of single-worker samples.
// FAILED_PRECONDITION when no single-worker sample reports communication_time_s.
absl::StatusOr<double> FitRequiredBandwidth(absl::Span<const Sample> samples,
                                            double parameter_size_mb, FitQuality* quality);

// Single-worker speed per instance type (or GPU type when the type is not given):
// measured_samples_per_s = batch / median iteration time. One FitQuality per entry.
// FAILED_PRECONDITION when no single-worker sample has an iteration time and a batch size.
absl::StatusOr<std::vector<predictor::ComputeProfile>> FitCompute(absl::Span<const Sample> samples,
                                                                  std::vector<FitQuality>* quality);

// a1, b1 of eq. 9 from iteration times at several cluster sizes: T_i(N) = T_i(1) +
// 2 S (1 / B_wk(N) - 1 / B_req). Needs S_parm, B_req, B_ps, single-worker runs of the same
// types (samples naming neither instance nor GPU type are left out), and runs of at least 3
// distinct worker counts; FAILED_PRECONDITION names what is missing ("contention needs runs with at
// least 3 distinct worker counts; got 1").
absl::StatusOr<ContentionFit> FitContention(absl::Span<const Sample> samples,
                                            const KnownParameters& known);

// a2, b2 of eq. 10 from (GPU memory in use, batch per GPU) pairs: batch = a2 * mem + b2.
// FAILED_PRECONDITION with fewer than 2 distinct batch sizes.
absl::StatusOr<predictor::MemoryModel> FitMemory(absl::Span<const Sample> samples,
                                                 FitQuality* quality);

// The global step of each of `samples` (same order). A job whose samples come from two or more
// workers (worker_id) is a live run, where `step` is each worker's own count (the instance
// contract): its global step at a sample is the sum of every worker's latest step at that sample's
// wall time (every worker step is one ASP iteration). Other samples (TensorBoard imports: one
// chief's log) keep their step, which is already global.
std::vector<double> GlobalSteps(absl::Span<const Sample> samples);

// g1..g5 of eq. 3 from loss curves, j = global step (GlobalSteps), b_w = the run's batch, R from
// |N| equal workers. g2 needs curves at 2 or more batch sizes and g4 at 2 or more cluster sizes;
// without them g2 is fixed at 0 and g4 at 1 (g3 absorbs the scale) and the note says so.
// FAILED_PRECONDITION with fewer than 8 samples that carry a loss.
absl::StatusOr<predictor::LossModel> FitLoss(absl::Span<const Sample> samples, FitQuality* quality);

// Everything FitWorkload could determine; parameters it could not are absent and have an
// unidentified FitQuality saying why.
struct WorkloadFit {
  std::optional<double> parameter_size_mb{};
  std::optional<double> required_bandwidth_mb_per_s{};
  std::vector<predictor::ComputeProfile> compute{};
  std::optional<predictor::ContentionModel> contention{};
  std::optional<predictor::MemoryModel> memory{};
  std::optional<predictor::LossModel> loss{};
  std::vector<FitQuality> quality{};
  predictor::ModelVariant variant = predictor::ModelVariant::kPaper;
  std::optional<predictor::SharedPsModel> shared_ps{};  // kSharedPs
  // One per metric the runs log (profiler/convergence_fit.h).
  std::vector<predictor::ConvergenceModel> convergence{};
  // The compute entries replace every entry of a base profile (they were fitted as a whole,
  // from runs of several types and sizes), rather than only those of the same type.
  bool compute_is_complete = false;
  // Synchronous samples (Sample::placement): how the workload trains, and its all-reduce model
  // per GPU type.
  predictor::SyncKind sync = predictor::SyncKind::kParameterServer;
  std::vector<predictor::AllReduceModel> allreduce{};
  // The synchronous fits' parameter spreads and worst residuals (all GPU types).
  std::vector<ParameterSpread> spread{};
  std::vector<FitResidual> worst_residuals{};
};

// Fits every parameter the samples determine. FAILED_PRECONDITION when `samples` is empty.
// Synchronous samples (with a placement) fit the all-reduce model of each of their GPU types
// (profiler/allreduce_fit.h) and make the workload an all-reduce one; the other samples fit the
// parameter-server model as below, when there are any.
// With runs of several cluster sizes (TensorBoard exports, checkpoint exports, per-worker
// samples) the shared-ps variant fits one compute time per type and the parameter servers' time d
// and queueing kappa from all of them together (see cluster_fit.h); S_parm = d B_ps / 2 then, and
// B_req is set to B_ps (the variant does not use it). The paper variant's contention a1, b1 is
// fitted from per-iteration times as before, or, when those lack and the variant is asked for,
// from the runs' speeds.
// `stop`, when given, is polled between the fits and at every solver iteration; a non-OK status
// ends the fit and is returned (a caller's deadline).
absl::StatusOr<WorkloadFit> FitWorkload(absl::Span<const Sample> samples,
                                        const KnownParameters& known,
                                        const std::function<absl::Status()>& stop = {});

// The fit as a profile named `name`: what it determined, with `known` filling S_parm and B_req
// when the fit did not.
predictor::WorkloadProfile ProfileOf(const WorkloadFit& fit, const KnownParameters& known,
                                     std::string name);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_FITTING_H_
