#include "profiler/sample.h"

#include <cmath>
#include <string>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/limits.h"
#include "predictor/types.h"

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
  for (const auto& [field, value, limit] :
       {std::tuple<const char*, const std::string*, size_t>{"job_id", &s.job_id,
                                                            limits::kMaxNameBytes},
        {"worker_id", &s.worker_id, limits::kMaxNameBytes},
        {"instance_type", &s.instance_type, limits::kMaxNameBytes},
        {"gpu_type", &s.gpu_type, limits::kMaxNameBytes},
        {"cluster", &s.cluster, limits::kMaxTextBytes}}) {
    if (value->size() > limit) {
      return absl::InvalidArgumentError(limits::LengthError(field, *value, limit));
    }
    // The sample's strings travel as protobuf strings, which must be UTF-8: a sample that could
    // not be sent (or stored) is refused here, wherever it came from.
    if (!limits::IsValidUtf8(*value)) {
      return absl::InvalidArgumentError(absl::StrCat(field, " = ", limits::Quote(*value),
                                                     ": not valid UTF-8 (invalid bytes shown as "
                                                     "U+FFFD)"));
    }
  }
  for (const auto& [field, value] : {std::pair<const char*, double>{"wall_time_s", s.wall_time_s},
                                     {"iteration_time_s", s.iteration_time_s},
                                     {"loss", s.loss},
                                     {"gpu_memory_gib", s.gpu_memory_gib},
                                     {"communication_time_s", s.communication_time_s},
                                     {"cluster_steps_per_s", s.cluster_steps_per_s},
                                     {"accuracy", s.accuracy}}) {
    if (auto status = CheckNumber(field, value); !status.ok()) return status;
  }
  for (const auto& [field, value] : {std::pair<const char*, std::int64_t>{"step", s.step},
                                     {"gpus", s.gpus},
                                     {"batch_size", s.batch_size},
                                     {"bytes_sent", s.bytes_sent},
                                     {"bytes_received", s.bytes_received},
                                     {"cluster_workers", s.cluster_workers},
                                     {"parameter_servers", s.parameter_servers}}) {
    if (auto status = CheckCount(field, value); !status.ok()) return status;
  }
  for (const auto& [field, value, most] :
       {std::tuple<const char*, std::int64_t, std::int64_t>{"gpus", s.gpus,
                                                            predictor::kMaxGpusPerInstance},
        {"batch_size", s.batch_size, std::int64_t{1} << 30},
        {"cluster_workers", s.cluster_workers, predictor::kMaxClusterSize},
        {"parameter_servers", s.parameter_servers, predictor::kMaxParameterServers}}) {
    if (value > most) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s = %d: must be at most %d", field, value, most));
    }
  }
  if (s.metrics.size() > kMaxSampleMetrics) {
    return absl::InvalidArgumentError(absl::StrFormat("metrics: %d given, at most %d per sample",
                                                      s.metrics.size(), kMaxSampleMetrics));
  }
  for (const auto& [name, value] : s.metrics) {
    if (!limits::IsMetricName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric.", limits::Quote(name), ": a metric's name is 1 to ",
                       limits::kMaxMetricNameBytes, " letters, digits and _ . - / :"));
    }
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("metric.%s = %g: must be finite", name, value));
    }
  }
  if (s.iteration_time_s > 0 && s.communication_time_s > s.iteration_time_s) {
    return absl::InvalidArgumentError(
        absl::StrFormat("communication_time_s = %g: exceeds iteration_time_s = %g",
                        s.communication_time_s, s.iteration_time_s));
  }
  if (s.wall_time_s == 0 && s.iteration_time_s == 0 && s.cluster_steps_per_s == 0 && s.loss == 0 &&
      s.bytes_sent == 0 && s.bytes_received == 0 && s.gpu_memory_gib == 0 && s.accuracy == 0 &&
      s.metrics.empty()) {
    return absl::InvalidArgumentError(
        "sample carries no measurement: set wall_time_s, iteration_time_s, "
        "cluster_steps_per_s, loss, accuracy, a metric, bytes or gpu_memory_gib");
  }
  if (!s.cluster.empty()) {
    auto composition = ParseComposition(s.cluster);
    if (!composition.ok()) return composition.status();
    int total = 0;
    for (const auto& [type, n] : *composition) total += n;
    if (s.cluster_workers != 0 && s.cluster_workers != total) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cluster_workers = %d: the cluster %s has %d workers", s.cluster_workers,
                          limits::Quote(s.cluster), total));
    }
  }
  if (s.instances != 0 || s.gpus_per_instance != 0) {
    Sample completed = s;
    if (auto st = CompletePlacement(completed); !st.ok()) return st;
  }
  if (!s.placement.empty()) {
    if (s.placement.size() > limits::kMaxTextBytes) {
      return absl::InvalidArgumentError(
          limits::LengthError("placement", s.placement, limits::kMaxTextBytes));
    }
    auto gpus = ParsePlacement(s.placement);
    if (!gpus.ok()) return gpus.status();
    int ranks = 0;
    for (int k : *gpus) ranks += k;
    if (s.cluster_workers != 0 && s.cluster_workers != ranks) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cluster_workers = %d: the placement %s has %d ranks", s.cluster_workers,
                          limits::Quote(s.placement), ranks));
    }
    if (s.iteration_time_s > 0 && s.batch_size < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "local_batch = %d: a synchronous sample's step time needs its local batch (samples "
          "per rank per step, at least 1)",
          s.batch_size));
    }
  }
  return absl::OkStatus();
}

absl::Status CompletePlacement(Sample& s) {
  if (s.instances < 0 || s.instances > predictor::kMaxClusterSize) {
    return absl::InvalidArgumentError(absl::StrFormat("instances = %d: must be in [1, %d]",
                                                      s.instances, predictor::kMaxClusterSize));
  }
  if (s.gpus_per_instance < 0 || s.gpus_per_instance > predictor::kMaxGpusPerInstance) {
    return absl::InvalidArgumentError(absl::StrFormat("gpus_per_instance = %d: must be in [1, %d]",
                                                      s.gpus_per_instance,
                                                      predictor::kMaxGpusPerInstance));
  }
  if (s.instances == 0 && s.gpus_per_instance == 0) return absl::OkStatus();
  if (s.placement.empty()) {
    if (s.instances == 0 || s.gpus_per_instance == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.instances == 0 ? absl::StrCat("gpus_per_instance = ", s.gpus_per_instance)
                           : absl::StrCat("instances = ", s.instances),
          ": give instances= and gpus_per_instance= together (or placement=, the GPUs on each "
          "instance: 4,4)"));
    }
    if (static_cast<std::int64_t>(s.instances) * s.gpus_per_instance > predictor::kMaxClusterSize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("instances = %d, gpus_per_instance = %d: more than %d ranks in all",
                          s.instances, s.gpus_per_instance, predictor::kMaxClusterSize));
    }
    s.placement = PlacementText(std::vector<int>(s.instances, s.gpus_per_instance));
    return absl::OkStatus();
  }
  auto gpus = ParsePlacement(s.placement);
  if (!gpus.ok()) return gpus.status();
  if (s.instances != 0 && static_cast<int>(gpus->size()) != s.instances) {
    return absl::InvalidArgumentError(absl::StrFormat("instances = %d: the placement %s has %d",
                                                      s.instances, limits::Quote(s.placement),
                                                      gpus->size()));
  }
  for (int k : *gpus) {
    if (s.gpus_per_instance != 0 && k != s.gpus_per_instance) {
      return absl::InvalidArgumentError(
          absl::StrFormat("gpus_per_instance = %d: the placement %s has %d GPUs on an instance",
                          s.gpus_per_instance, limits::Quote(s.placement), k));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ParsePlacement(absl::string_view text) {
  std::vector<int> out;
  std::int64_t total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int k = 0;
    if (!absl::SimpleAtoi(part, &k) || k < 1 || k > predictor::kMaxGpusPerInstance) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement = ", limits::Quote(text), ": entry ", limits::Quote(part),
                       " is not a number of GPUs in [1, ", predictor::kMaxGpusPerInstance, "]"));
    }
    total += k;
    if (total > predictor::kMaxClusterSize) {
      return absl::InvalidArgumentError(absl::StrCat("placement = ", limits::Quote(text),
                                                     ": more than ", predictor::kMaxClusterSize,
                                                     " ranks in all"));
    }
    out.push_back(k);
  }
  return out;
}

std::string PlacementText(const std::vector<int>& gpus_per_instance) {
  return absl::StrJoin(gpus_per_instance, ",");
}

absl::StatusOr<std::map<std::string, int>> ParseComposition(absl::string_view text) {
  std::map<std::string, int> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  std::int64_t total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t eq = part.find('=');
    int n = 0;
    if (eq == absl::string_view::npos || eq == 0 || !absl::SimpleAtoi(part.substr(eq + 1), &n) ||
        n < 1 || n > predictor::kMaxClusterSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster = ", limits::Quote(text), ": entry ", limits::Quote(part),
                       " is not TYPE=N with N in [1, ", predictor::kMaxClusterSize, "]"));
    }
    const std::string type(absl::StripAsciiWhitespace(part.substr(0, eq)));
    if (type.size() > limits::kMaxNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster = ", limits::Quote(text), ": ",
                       limits::LengthError("type", type, limits::kMaxNameBytes)));
    }
    if (!out.emplace(type, n).second) {
      return absl::InvalidArgumentError(absl::StrCat("cluster = ", limits::Quote(text), ": type ",
                                                     limits::Quote(type), " given more than once"));
    }
    total += n;
    if (total > predictor::kMaxClusterSize) {
      return absl::InvalidArgumentError(absl::StrCat("cluster = ", limits::Quote(text),
                                                     ": more than ", predictor::kMaxClusterSize,
                                                     " workers in all"));
    }
  }
  return out;
}

std::string CompositionText(const std::map<std::string, int>& composition) {
  std::string out;
  for (const auto& [type, n] : composition) {
    absl::StrAppend(&out, out.empty() ? "" : ",", type, "=", n);
  }
  return out;
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
