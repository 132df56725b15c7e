// Domain types of the performance model: instance catalogs, workload profiles and clusters.
// Plain structs, no gRPC or protobuf; services/ converts to and from the spotdnn.v1 messages.
#ifndef SPOTDNN_PREDICTOR_TYPES_H_
#define SPOTDNN_PREDICTOR_TYPES_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "predictor/convergence.h"

namespace spotdnn::predictor {

// Most instances of one type a quota or a cluster may hold. Far above any real spot quota; it keeps
// counts, their sums and every planning strategy's search finite and well inside `int`.
inline constexpr int kMaxInstancesPerType = 10'000;
// Most workers in one cluster (and the largest cluster a plan considers).
inline constexpr int kMaxClusterSize = 100'000;
// Most GPUs of one instance type (g_i), and the largest batch per GPU (b_k) a profile may give or
// the memory model may yield: their product, a worker's batch, stays well inside `int`.
inline constexpr int kMaxGpusPerInstance = 1024;
inline constexpr int kMaxBatchPerGpu = 1 << 20;
// Largest global batch of a synchronous workload (samples per step over every rank).
inline constexpr int kMaxGlobalBatch = 1 << 30;
// Most parameter servers of one cluster.
inline constexpr int kMaxParameterServers = 1000;
// Largest training targets a request may state: global iterations, epochs, and samples in one
// epoch (a dataset). Far beyond any real job; they keep every time and cost derived finite.
inline constexpr double kMaxTargetIterations = 1e15;
inline constexpr double kMaxTargetEpochs = 1e6;
inline constexpr double kMaxDatasetSize = 1e12;

// A GPU instance type with its prices and the user's quota (Lim_m).
struct InstanceType {
  std::string name;
  std::string gpu_type;
  int gpus = 1;                    // g_i, in [1, kMaxGpusPerInstance]
  double gpu_memory_gib = 0;       // mem_k of one GPU (eq. 10)
  double spot_price_per_hour = 0;  // p_m
  double on_demand_price_per_hour = 0;
  int quota = 0;  // Lim_m, in [0, kMaxInstancesPerType]
};

// The parameter server a cluster trains against; prices of 0 mean "not priced".
struct ParameterServer {
  std::string instance_type;
  double bandwidth_mb_per_s = 0;  // B_ps of one server
  double spot_price_per_hour = 0;
  double on_demand_price_per_hour = 0;
};

// The instance types a job may use in one region.
struct InstanceCatalog {
  std::string name;
  std::string provider;
  std::string region;
  std::vector<InstanceType> types;
  ParameterServer parameter_server;
  double pcie_bandwidth_mb_per_s = 0;  // B_pcie

  // Index of the type called `name` in `types`, or -1.
  int IndexOf(absl::string_view type_name) const;
  // OK when every field is usable by the model; otherwise INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

// Which variant of the model a profile was fitted for (see VariantCoefficients). kSharedPs
// replaces eqs. 8-9 by the shared parameter-server model (SharedPsModel); the others are the
// paper's equations as written and as the spotDNN prototype computes them.
enum class ModelVariant { kPaper, kSpotdnnPrototype, kSharedPs };

// The coefficients through which a variant changes the one model code path.
struct VariantCoefficients {
  double convergence_weight;     // multiplies R in eq. 3; the prototype drops R (0)
  double pcie_profiling_sign;    // T_comp = T_meas - 2S/B_req - sign * 2gS/B_pcie (prototype: -1)
  double pcie_iteration_weight;  // weight of 2gS/B_pcie in T_i (eq. 7; prototype: 0)
  double wa_batch_step;          // b_w rounded to a multiple of this; 0 = not rounded
  bool integer_iterations;       // j rounded to the nearest integer
  double time_step;              // T rounded to a multiple of this before costing; 0 = not
};
VariantCoefficients CoefficientsOf(ModelVariant variant);
// "paper", "spotdnn-prototype" or "shared-ps".
absl::string_view VariantName(ModelVariant variant);
// The variant VariantName calls `name`; INVALID_ARGUMENT naming the known ones otherwise.
absl::StatusOr<ModelVariant> ParseVariant(absl::string_view name);

// Compute time of one worker for an instance type or for every type with a GPU type.
struct ComputeProfile {
  std::string instance_type;  // set this or gpu_type
  std::string gpu_type;
  int batch_per_gpu = 0;  // b_k profiled at, at most kMaxBatchPerGpu; 0 = from the memory model
  std::optional<double> compute_time_s;          // T_comp, or
  std::optional<double> measured_samples_per_s;  // single-worker speed T_comp is derived from
};

// PS contention, eq. 9.
struct ContentionModel {
  double a1 = 0;
  double b1 = 0;
};

// The shared parameter-server model (ModelVariant::kSharedPs). A worker's iteration is its compute
// time z_i plus one exchange with the parameter servers, which serve every worker's exchanges:
// T_i = z_i + R. With P servers each exchange puts d = 2 S_parm / (P B_ps) seconds of work on every
// server (each holds 1/P of the parameters), and waits behind the others' work as a single-server
// queue does: R = d (1 + kappa W / (1 - W)), where W = d sum_i 1/T_i is the servers' utilisation,
// solved as a fixed point. A slow worker sends fewer exchanges per second and so loads the servers
// less than a fast one; a second server halves d and the load.
struct SharedPsModel {
  // kappa: waiting per unit of an M/M/1 queue's W/(1 - W). 1 for exponential service, 0.5 for
  // fixed-size exchanges arriving at random, less when they arrive more regularly than that; 0 is
  // a hard knee at the servers' capacity P / d.
  double queueing = 0.5;
};

// Largest batch from GPU memory, eq. 10.
struct MemoryModel {
  double a2 = 0;
  double b2 = 0;
};

// Loss after normalized iterations, eq. 3.
struct LossModel {
  double g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0;
};

// How a workload trains: asynchronous parameter-server training (the paper's) or synchronous
// all-reduce data parallelism (PyTorch DDP).
enum class SyncKind { kParameterServer, kAllReduce };
// "ps" or "allreduce".
absl::string_view SyncKindName(SyncKind kind);
// The kind SyncKindName calls `name`; INVALID_ARGUMENT naming `field` and the known ones otherwise.
absl::StatusOr<SyncKind> ParseSyncKind(absl::string_view name, absl::string_view field = "sync");

// What a synchronous workload's global batch does when its cluster changes: kFixed, the same on
// every cluster (the steps to a target do not depend on the cluster); kScale, every rank keeps its
// local batch, so the global batch follows the ranks (and so do the steps to a target).
enum class GlobalBatch { kFixed, kScale };

// The synchronous step time of one GPU type (predictor/allreduce.h evaluates it). With k GPUs busy
// on an instance and local batch b, a rank computes for (a_c + b_c b)(1 + d (k - 1)); the gradients
// are all-reduced inside the busiest instance (k_max GPUs) as a ring, a_r + b_r 2(k_max - 1)/k_max,
// and across N > 1 instances for a_n + b_s sqrt(2 ln N) + c_k (k_max - 1), plus e_2 when N is
// exactly 2 (two-instance all-reduces measure slower than the growth in N says); compute and
// all-reduce overlap as (compute^gamma + all-reduce^gamma)^(1/gamma).
struct AllReduceModel {
  std::string gpu_type;
  double compute_fixed_s = 0;       // a_c
  double compute_per_sample_s = 0;  // b_c
  double compute_contention = 0;    // d
  double intra_fixed_s = 0;         // a_r
  double intra_ring_s = 0;          // b_r
  bool cross_instance = false;    // a_n, b_s, c_k, e_2 were fitted (runs on more than one instance)
  double cross_fixed_s = 0;       // a_n
  double cross_straggler_s = 0;   // b_s
  double cross_per_gpu_s = 0;     // c_k
  double cross_pair_s = 0;        // e_2, on exactly two instances
  double overlap_gamma = 1;       // gamma, in [1, 10]
  int max_gpus_per_instance = 0;  // the most GPUs on one instance in the fitted runs (0: unsaid)

  // OK when every number is finite and not negative, gamma in [1, 10] and the compute time of a
  // sample positive; INVALID_ARGUMENT naming `field` ("allreduce[T4].overlap_gamma = 0.5: ...").
  absl::Status Validate(absl::string_view field) const;
};

// Everything the model knows about a training workload.
struct WorkloadProfile {
  std::string name;
  double parameter_size_mb = 0;            // S_parm
  double required_bandwidth_mb_per_s = 0;  // B_req
  std::vector<ComputeProfile> compute;
  std::optional<ContentionModel> contention;  // a1, b1
  std::optional<MemoryModel> memory;          // a2, b2
  std::optional<LossModel> loss;              // g1..g5
  std::optional<SharedPsModel> shared_ps;     // kappa of the kSharedPs variant
  // Convergence of each metric the runs logged ("loss", "accuracy", ...), through the learning-rate
  // schedule and with the run-to-run spread (predictor/convergence.h). A target in a metric with
  // an entry here is predicted by it (with p10/p50/p90); a loss target without one by eq. 3
  // (`loss`).
  std::vector<ConvergenceModel> convergence;
  ModelVariant variant = ModelVariant::kPaper;
  SyncKind sync = SyncKind::kParameterServer;
  // The synchronous step-time model per GPU type (one entry per type).
  std::vector<AllReduceModel> allreduce;
  // A synchronous workload's global batch (samples per step over every rank); 0 = not declared.
  int global_batch_size = 0;
  // A synchronous job's restart (all ranks stop: rendezvous, start, checkpoint load) and its
  // checkpoint interval, in seconds; unset: the simulator's defaults.
  std::optional<double> restart_s;
  std::optional<double> checkpoint_every_s;
  GlobalBatch global_batch = GlobalBatch::kFixed;
  // kScale: samples per rank per step (the global batch is the ranks times this); 0 = not
  // declared.
  int local_batch_size = 0;

  // The all-reduce model of `gpu_type`, or nullptr.
  const AllReduceModel* AllReduceOf(absl::string_view gpu_type) const;

  // How complete a profile must be: a profile to predict with needs S_parm and B_req
  // (kComplete); one a fit stores may leave what its samples did not determine at 0 (kPartial).
  // Every value that is set passes the same checks either way.
  enum class Completeness { kComplete, kPartial };
  // OK when the profile's numbers are usable; otherwise INVALID_ARGUMENT naming the field.
  absl::Status Validate(Completeness completeness = Completeness::kComplete) const;
};

// What a prediction or a plan trains for: a loss (the convergence model, else eq. 3, gives the
// iterations), a value of another metric with a direction (kMetric: "accuracy >= 0.88"; the
// profile's convergence model of that metric gives the iterations), a number of global iterations
// (each worker step is one, as in an ASP parameter-server job), or a number of training samples
// (epochs times the dataset size; the iterations are samples / b_w, the WA batch).
struct Target {
  enum class Kind { kLoss, kIterations, kSamples, kMetric };
  Kind kind = Kind::kLoss;
  double value = 0;               // the loss, the iterations, the samples or the metric's value
  std::string metric{};           // kMetric: "accuracy" or a sample's metric name
  bool higher_is_better = false;  // kMetric: reach value or more (else value or less)

  static Target Loss(double loss) { return {Kind::kLoss, loss}; }
  static Target Iterations(double iterations) { return {Kind::kIterations, iterations}; }
  static Target Samples(double samples) { return {Kind::kSamples, samples}; }
  static Target Metric(std::string metric, bool higher_is_better, double value) {
    return {Kind::kMetric, value, std::move(metric), higher_is_better};
  }
  static Target Accuracy(double accuracy) { return Metric("accuracy", true, accuracy); }
  bool is_loss() const { return kind == Kind::kLoss; }
  // A target a convergence model answers: a loss or another metric.
  bool is_metric() const { return kind == Kind::kLoss || kind == Kind::kMetric; }
  // The metric's name: "loss" for kLoss, `metric` for kMetric, "" otherwise.
  std::string MetricName() const;
  // INVALID_ARGUMENT naming `field` unless the value is usable: a finite loss, or a positive
  // finite number of iterations (at most kMaxTargetIterations) or samples (at most
  // kMaxTargetEpochs x kMaxDatasetSize).
  absl::Status Validate(absl::string_view field = "target") const;
  // "loss 0.5", "accuracy >= 0.88", "64000 iterations", "6.4e+06 samples".
  std::string Describe() const;
};

// Workers per catalog type (indexed like InstanceCatalog::types) and parameter servers.
struct Cluster {
  std::vector<int> counts;
  int parameter_servers = 1;  // in [1, kMaxParameterServers]

  // |N|, the sum of the counts (saturates at INT_MAX for counts MakeCluster would refuse).
  int Workers() const;
};

// Builds a Cluster from (type name, count) pairs; names must be in the catalog, counts in
// [0, kMaxInstancesPerType], at most kMaxClusterSize in all, a type may appear once, and
// parameter_servers in [1, kMaxParameterServers].
// INVALID_ARGUMENT names the offending entry.
absl::StatusOr<Cluster> MakeCluster(const InstanceCatalog& catalog,
                                    const std::vector<std::pair<std::string, int>>& counts,
                                    int parameter_servers = 1);

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_TYPES_H_
