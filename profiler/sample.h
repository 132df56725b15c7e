// One measured training iteration (a "sample") and the checks every sample passes before it is
// stored, whatever way it came in (gRPC stream, TensorBoard export, worker log, CSV, log line).
#ifndef SPOTDNN_PROFILER_SAMPLE_H_
#define SPOTDNN_PROFILER_SAMPLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/limits.h"

namespace spotdnn::profiler {

// One worker's measurement of one iteration. Numbers left at 0 were not measured (proto3 style).
struct Sample {
  std::string job_id{};
  std::string worker_id{};
  std::string instance_type{};
  std::string gpu_type{};
  int gpus = 0;        // g_i
  int batch_size = 0;  // samples per iteration on this worker, b_i
  // The reporter's own step count (1, 2, 3, ...): with a worker_id, that worker's steps (the
  // job's global iterations are the sum of its workers' steps, as `spotdnn run` counts them);
  // without one (a cluster-level log such as a TensorBoard export), the cluster's global step.
  std::int64_t step = 0;
  double wall_time_s = 0;       // seconds since the epoch
  double iteration_time_s = 0;  // T_i as measured
  double loss = 0;
  std::int64_t bytes_sent = 0;      // to the parameter server, this iteration
  std::int64_t bytes_received = 0;  // from the parameter server, this iteration
  double gpu_memory_gib = 0;        // GPU memory in use on one GPU
  int cluster_workers = 0;          // |N| when measured
  double communication_time_s = 0;  // part of T_i spent pushing and pulling parameters
  double cluster_steps_per_s = 0;   // global steps/s of the whole cluster (TensorBoard)
  double accuracy = 0;              // a scalar logged beside the step (test accuracy), kept
  int parameter_servers = 0;        // parameter servers of the run (0 = not said, taken as 1)
  // Workers per type of a run on several types, "TYPE=N,TYPE=N" (instance or GPU types); empty
  // for a run of cluster_workers workers of instance_type (or gpu_type).
  std::string cluster{};
  // Other metrics the run logged beside the step ("top5" for `metric.top5=0.93`), by name.
  std::map<std::string, double> metrics{};
  // A synchronous all-reduce run: the GPUs (ranks) on each instance, "4,4" for two instances of 4
  // (PlacementText). batch_size is then one rank's local batch, iteration_time_s the step time,
  // communication_time_s the all-reduce's share of it (when measured) and cluster_workers the
  // ranks. Empty: not a synchronous sample.
  std::string placement{};
  // A synchronous run's instances and GPUs (ranks) per instance, as a sample line may give them
  // instead of (or beside) its placement: CompletePlacement writes the even placement they make.
  // 0: not said.
  int instances = 0;
  int gpus_per_instance = 0;
};

// Fills an empty placement from instances x gpus_per_instance (both needed then), and checks
// that what a sample says of its placement agrees: instances with the placement's instances,
// gpus_per_instance with the GPUs of each of them. INVALID_ARGUMENT names the field and value
// ("instances = 3: the placement \"4,4\" has 2 instances"). Read every field before calling.
absl::Status CompletePlacement(Sample& sample);

// The GPUs on each instance of a placement "4,4" (each in [1, predictor::kMaxGpusPerInstance], at
// most predictor::kMaxClusterSize in all); INVALID_ARGUMENT naming the entry.
absl::StatusOr<std::vector<int>> ParsePlacement(absl::string_view text);
// "4,4": the placement's text.
std::string PlacementText(const std::vector<int>& gpus_per_instance);

// Most metrics one sample may carry.
inline constexpr size_t kMaxSampleMetrics = limits::kMaxMetricsPerSample;

// OK when every number is usable: finite, not negative, gpus at most
// predictor::kMaxGpusPerInstance, batch_size at most 2^30, cluster_workers at most
// predictor::kMaxClusterSize, parameter_servers at most predictor::kMaxParameterServers, and a
// sample says something (a time, a speed, a loss or an accuracy); the ids and names (job_id,
// worker_id, instance_type, gpu_type) at most limits::kMaxNameBytes; cluster, when given, a
// composition (ParseComposition) of at most limits::kMaxTextBytes whose workers are
// cluster_workers (when that is given); at most kMaxSampleMetrics metrics, each named as
// limits::IsMetricName says, with a finite value (negative allowed). INVALID_ARGUMENT names the
// field and value ("loss = nan: must be finite", "metric.top5 = inf: must be finite").
absl::Status ValidateSample(const Sample& sample);

// Parses a Sample::cluster composition "TYPE=N,TYPE=N" (N >= 1, each type once, a type at most
// limits::kMaxNameBytes, at most predictor::kMaxClusterSize workers in all) into a sorted map.
// INVALID_ARGUMENT names the entry; an empty text gives an empty map.
absl::StatusOr<std::map<std::string, int>> ParseComposition(absl::string_view text);
// The canonical text of a composition: "A=1,B=2", types sorted.
std::string CompositionText(const std::map<std::string, int>& composition);

// Rejects steps that go backwards within one (job, worker) stream. Not thread-safe.
class StepOrderChecker {
 public:
  // INVALID_ARGUMENT naming the step and the one before it when `sample` goes backwards.
  absl::Status Check(const Sample& sample);

 private:
  std::map<std::pair<std::string, std::string>, std::int64_t> last_step_;
};

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_SAMPLE_H_
