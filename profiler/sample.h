// One measured training iteration (a "sample") and the checks every sample passes before it is
// stored, whatever way it came in (gRPC stream, TensorBoard export, worker log, CSV, log line).
#ifndef SPOTDNN_PROFILER_SAMPLE_H_
#define SPOTDNN_PROFILER_SAMPLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace spotdnn::profiler {

// One worker's measurement of one iteration. Numbers left at 0 were not measured (proto3 style).
struct Sample {
  std::string job_id{};
  std::string worker_id{};
  std::string instance_type{};
  std::string gpu_type{};
  int gpus = 0;                 // g_i
  int batch_size = 0;           // samples per iteration on this worker, b_i
  std::int64_t step = 0;        // global step (ASP: counts every worker's iterations)
  double wall_time_s = 0;       // seconds since the epoch
  double iteration_time_s = 0;  // T_i as measured
  double loss = 0;
  std::int64_t bytes_sent = 0;      // to the parameter server, this iteration
  std::int64_t bytes_received = 0;  // from the parameter server, this iteration
  double gpu_memory_gib = 0;        // GPU memory in use on one GPU
  int cluster_workers = 0;          // |N| when measured
  double communication_time_s = 0;  // part of T_i spent pushing and pulling parameters
  double cluster_steps_per_s = 0;   // global steps/s of the whole cluster (TensorBoard)
};

// OK when every number is usable: finite, not negative, gpus at most
// predictor::kMaxGpusPerInstance, batch_size at most 2^30, cluster_workers at most
// predictor::kMaxClusterSize, and a sample says something (a time, a speed or a loss); and the
// ids and names (job_id, worker_id, instance_type, gpu_type) at most limits::kMaxNameBytes.
// INVALID_ARGUMENT names the field and value ("loss = nan: must be finite").
absl::Status ValidateSample(const Sample& sample);

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
