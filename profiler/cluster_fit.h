// Fitting the speed of whole training runs: the global steps/s of every worker together, measured
// on clusters of several sizes, GPU types and parameter-server counts, all fitted at once. Two
// forms of the parameter server's contention are fitted this way:
//   - the shared parameter-server model (ModelVariant::kSharedPs, predictor::SharedPsModel): one
//     compute time per type plus one model of the servers that every run shares; and
//   - the paper's eqs. 8-9 (|N| workers share P B_ps equally with probability
//     P = a1 sqrt(|N|) + b1), kept to reproduce the paper and to compare against.
// Heterogeneous runs (several types in one cluster) may be fitted and checked as well.
// The runs and observations are built in cluster_runs.cc, the fits in cluster_fit.cc.
#ifndef SPOTDNN_PROFILER_CLUSTER_FIT_H_
#define SPOTDNN_PROFILER_CLUSTER_FIT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/types.h"
#include "profiler/fitting.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// One run (job): what trained together and how fast.
struct ClusterRun {
  std::string job_id{};
  std::map<std::string, int> composition{};  // workers per type key (instance type, else GPU)
  int parameter_servers = 1;
  double steps_per_s = 0;  // global steps/s of the whole cluster
  double steps = 0;        // global steps its checkpoints span (0 when not measured so)
  double duration_s = 0;   // the wall time they took
};

// What the samples say about one type key.
struct TypeInfo {
  std::string instance_type{};  // empty when the key is a GPU type
  std::string gpu_type{};
  int gpus = 1;
  int batch_per_gpu = 0;  // 0 when no sample gave a batch
};

// A job (or one configuration of it) that gave no run, and why.
struct LeftOutJob {
  std::string job{};
  std::string reason{};  // without the job: "its samples name no instance_type or gpu_type ..."
};

// Runs, the types they use, and the jobs that gave no run (with why).
struct RunSet {
  std::vector<ClusterRun> runs{};
  std::map<std::string, TypeInfo> types{};
  std::vector<std::string> notes{};  // one line per job left out: "job J left out: why"
  std::vector<LeftOutJob> left_out{};

  // The jobs left out, grouped by reason with their counts: "207 jobs left out: 200 because
  // their samples name no ... (the first: J), 7 because ..."; empty when none was.
  std::string LeftOutSummary() const;
};

// Groups samples by job (and, within a job, by composition and server count) into runs. A run's
// speed comes from per-worker iteration times when it has them (sum over types of workers /
// median time), else from the span of its cluster-level checkpoints (global steps over wall time;
// a step that does not increase starts another run: a restart, or a second run imported under the
// same job), else from the median of its cluster_steps_per_s. Jobs that name no type, or give no
// speed, are noted and left out.
RunSet RunsFromSamples(absl::Span<const Sample> samples);

// The runs of one cluster configuration.
struct ClusterObservation {
  std::map<std::string, int> composition{};
  int parameter_servers = 1;
  int runs = 0;
  double steps_per_s = 0;  // median over the runs (robust to a run that went wrong)
  double steps = 0;        // median steps of the runs measured by checkpoints (0: none)
  double duration_s = 0;   // median duration of those runs
  // "V100=4, 1 PS".
  std::string Describe() const;
};

// One observation per (composition, parameter servers), sorted.
std::vector<ClusterObservation> GroupRuns(absl::Span<const ClusterRun> runs);

// The shared parameter-server model in the units runs determine: z per type, d of one server.
struct SharedPsFit {
  std::map<std::string, double> compute_time_s{};  // z_i per type key
  double service_time_s = 0;                       // d with one server: 2 S_parm / B_ps
  double queueing = 0.5;                           // kappa
  // Predicted global steps/s; 0 when a type is not in compute_time_s.
  double StepsPerS(const std::map<std::string, int>& composition, int parameter_servers) const;
};

// A fit and its quality: one FitQuality per type ("T_comp[KEY]"), "S_parm" (the servers' time
// per iteration), "queueing", and "shared-ps" (every observation's speed).
struct SharedPsFitResult {
  SharedPsFit fit;
  std::vector<FitQuality> quality{};
  bool queueing_identified = false;
};

// What FitSharedPs takes as known.
struct SharedPsFitOptions {
  double service_time_s = 0;         // > 0: d is known (e.g. a base profile's S_parm and B_ps)
  std::optional<double> queueing{};  // set: kappa is known
};

// Fits z per type, d and kappa to the observations' log speeds (Levenberg-Marquardt, least
// squares, several starts; each observation is already the median of its runs). d needs more
// configurations than types (some type at two sizes or server counts), kappa two more than types
// and some type at three; without them d is FAILED_PRECONDITION naming what is missing, and kappa
// is held at 0.5 (said in its note).
absl::StatusOr<SharedPsFitResult> FitSharedPs(absl::Span<const ClusterObservation> observations,
                                              const SharedPsFitOptions& options = {});

// The paper's eqs. 6-9 on cluster speeds: T_i = T_comp_i + 2 S / B_wk(|N|) + 2 g_i S / B_pcie,
// B_wk from eq. 8 with P = clamp(a1 sqrt(|N|) + b1, 0, 1) and the servers' bandwidth P B_ps.
struct PaperFormFit {
  std::map<std::string, double> compute_time_s{};  // T_comp per type key
  std::map<std::string, int> gpus{};               // g per type key (1 when not said)
  double parameter_size_mb = 0;                    // S_parm
  double required_bandwidth_mb_per_s = 0;          // B_req
  predictor::ContentionModel contention{};         // a1, b1
  double ps_bandwidth_mb_per_s = 0;                // B_ps of one server (given)
  double pcie_bandwidth_mb_per_s = 10000;          // B_pcie (given)
  double StepsPerS(const std::map<std::string, int>& composition, int parameter_servers) const;
};

struct PaperFormFitResult {
  PaperFormFit fit;
  std::vector<FitQuality> quality{};
};

// Fits T_comp per type, S_parm, B_req, a1 and b1 to the observations' log speeds with B_ps given
// (least squares, several starts).
// FAILED_PRECONDITION without B_ps or with fewer than 3 distinct cluster sizes.
absl::StatusOr<PaperFormFitResult> FitPaperForm(absl::Span<const ClusterObservation> observations,
                                                const std::map<std::string, TypeInfo>& types,
                                                double ps_bandwidth_mb_per_s,
                                                double pcie_bandwidth_mb_per_s = 10000);

// One checked cluster: its runs' median against the prediction from its composition.
struct ClusterCheck {
  ClusterObservation observed;
  double predicted_steps_per_s = 0;
  double iterations = 0;  // the time below is for this many global steps
  double observed_time_s = 0;
  double predicted_time_s = 0;
  double error_pct = 0;  // |predicted - observed| / observed time
};

// A validation: the profile fitted on one set of runs, every cluster of another predicted.
struct FitValidation {
  predictor::WorkloadProfile profile;
  std::vector<FitQuality> quality{};
  std::vector<ClusterCheck> clusters{};
  double mape = 0;
  double max_error_pct = 0;
};

// Fits a profile on `fit` (FitWorkload with `known`) and predicts each cluster of `check` with the
// performance model, for `iterations` global steps (0: the steps its runs spanned, else 10,000):
// observed time = the runs' median duration (or iterations / observed speed), predicted time =
// iterations / predicted speed. FAILED_PRECONDITION when a check cluster uses a type the fit has
// no speed for (naming the types) or no check run has a speed. `stop`, when given, is the fit's
// stop check (as in FitWorkload); a non-OK status ends the validation and is returned.
absl::StatusOr<FitValidation> ValidateFit(absl::Span<const Sample> fit,
                                          absl::Span<const Sample> check,
                                          const KnownParameters& known, double iterations = 0,
                                          const std::function<absl::Status()>& stop = {});

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_CLUSTER_FIT_H_
