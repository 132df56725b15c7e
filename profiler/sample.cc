#include "profiler/sample.h"

#include <cmath>
#include <string>
#include <tuple>

#include "absl/strings/str_format.h"
#include "predictor/types.h"
#include "services/common/limits.h"

namespace spotdnn::profiler {
namespace {

absl::Status CheckNumber(const char* field, double value) {
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s = %g: must be finite", field, value));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %g: must not be negative", field, value));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(const char* field, std::int64_t value) {
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %d: must not be negative", field, value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSample(const Sample& s) {
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"job_id", &s.job_id},
        {"worker_id", &s.worker_id},
        {"instance_type", &s.instance_type},
        {"gpu_type", &s.gpu_type}}) {
    if (value->size() > limits::kMaxNameBytes) {
      return absl::InvalidArgumentError(limits::LengthError(field, *value, limits::kMaxNameBytes));
    }
  }
  for (const auto& [field, value] : {std::pair<const char*, double>{"wall_time_s", s.wall_time_s},
                                     {"iteration_time_s", s.iteration_time_s},
                                     {"loss", s.loss},
                                     {"gpu_memory_gib", s.gpu_memory_gib},
                                     {"communication_time_s", s.communication_time_s},
                                     {"cluster_steps_per_s", s.cluster_steps_per_s}}) {
    if (auto status = CheckNumber(field, value); !status.ok()) return status;
  }
  for (const auto& [field, value] : {std::pair<const char*, std::int64_t>{"step", s.step},
                                     {"gpus", s.gpus},
                                     {"batch_size", s.batch_size},
                                     {"bytes_sent", s.bytes_sent},
                                     {"bytes_received", s.bytes_received},
                                     {"cluster_workers", s.cluster_workers}}) {
    if (auto status = CheckCount(field, value); !status.ok()) return status;
  }
  for (const auto& [field, value, most] :
       {std::tuple<const char*, std::int64_t, std::int64_t>{"gpus", s.gpus,
                                                            predictor::kMaxGpusPerInstance},
        {"batch_size", s.batch_size, std::int64_t{1} << 30},
        {"cluster_workers", s.cluster_workers, predictor::kMaxClusterSize}}) {
    if (value > most) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s = %d: must be at most %d", field, value, most));
    }
  }
  if (s.iteration_time_s > 0 && s.communication_time_s > s.iteration_time_s) {
    return absl::InvalidArgumentError(
        absl::StrFormat("communication_time_s = %g: exceeds iteration_time_s = %g",
                        s.communication_time_s, s.iteration_time_s));
  }
  if (s.wall_time_s == 0 && s.iteration_time_s == 0 && s.cluster_steps_per_s == 0 && s.loss == 0 &&
      s.bytes_sent == 0 && s.bytes_received == 0 && s.gpu_memory_gib == 0) {
    return absl::InvalidArgumentError(
        "sample carries no measurement: set wall_time_s, iteration_time_s, "
        "cluster_steps_per_s, loss, bytes or gpu_memory_gib");
  }
  return absl::OkStatus();
}

absl::Status StepOrderChecker::Check(const Sample& sample) {
  auto [it, inserted] = last_step_.try_emplace({sample.job_id, sample.worker_id}, sample.step);
  if (inserted) return absl::OkStatus();
  if (sample.step < it->second) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step = %d: goes backwards (the previous sample of job \"%s\" worker \"%s\" was step %d)",
        sample.step, sample.job_id, sample.worker_id, it->second));
  }
  it->second = sample.step;
  return absl::OkStatus();
}

}  // namespace spotdnn::profiler
