// The SPOTDNN_SAMPLE line format: "SPOTDNN_SAMPLE key=value ..." (ParseSampleLine) and the field
// setters the other formats share.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/limits.h"
#include "base/text.h"
#include "profiler/import_internal.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace import_internal {

absl::StatusOr<double> ParseDouble(absl::string_view field, absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  double value = 0;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (!absl::SimpleAtod(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", base::QuotedValue(text), ": not a number"));
  }
  return value;
}

absl::StatusOr<std::int64_t> ParseInteger(absl::string_view field, absl::string_view text) {
  auto value = ParseDouble(field, text);
  if (!value.ok()) return value.status();
  if (!std::isfinite(*value) || *value != std::floor(*value) || std::fabs(*value) > 9e15) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = ", base::QuotedValue(absl::StripAsciiWhitespace(text)), ": not a whole number"));
  }
  return static_cast<std::int64_t>(*value);
}

absl::StatusOr<int> ParseSmallInteger(absl::string_view field, absl::string_view text) {
  auto value = ParseInteger(field, text);
  if (!value.ok()) return value.status();
  if (*value > 1'000'000'000 || *value < -1'000'000'000) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", *value, ": out of range"));
  }
  return static_cast<int>(*value);
}

// Sets the Sample field `key` (a Sample field name or an accepted alias) from `text`.
// NOT_FOUND for an unknown key.
absl::Status SetField(absl::string_view key, absl::string_view text, Sample& s) {
  const std::string k = absl::AsciiStrToLower(absl::StripAsciiWhitespace(key));
  auto set_double = [&](double& out) -> absl::Status {
    auto v = ParseDouble(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  auto set_int = [&](int& out) -> absl::Status {
    auto v = ParseSmallInteger(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  auto set_int64 = [&](std::int64_t& out) -> absl::Status {
    auto v = ParseInteger(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  const std::string value(absl::StripAsciiWhitespace(text));
  if (absl::StartsWith(k, "metric.")) {
    // "metric.NAME": another metric the run logged (top-5 accuracy, BLEU, ...); NAME as written.
    const std::string name(absl::StripAsciiWhitespace(key).substr(7));
    if (!limits::IsMetricName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric.", limits::Quote(name), ": a metric's name is 1 to ",
                       limits::kMaxMetricNameBytes, " letters, digits and _ . - / :"));
    }
    auto v = ParseDouble(absl::StrCat("metric.", name), text);
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("metric.%s = %s: must be a finite number", name, value));
    }
    s.metrics[name] = *v;
    return absl::OkStatus();
  }
  if (k == "job_id" || k == "job") return (s.job_id = value, absl::OkStatus());
  if (k == "worker_id" || k == "worker") return (s.worker_id = value, absl::OkStatus());
  if (k == "instance_type") return (s.instance_type = value, absl::OkStatus());
  if (k == "gpu_type" || k == "gpu") return (s.gpu_type = value, absl::OkStatus());
  if (k == "gpus") return set_int(s.gpus);
  if (k == "batch_size" || k == "batch") return set_int(s.batch_size);
  if (k == "step" || k == "global_step") return set_int64(s.step);
  if (k == "wall_time_s" || k == "wall_time" || k == "wall time") return set_double(s.wall_time_s);
  if (k == "iteration_time_s" || k == "step_time" || k == "step time" || k == "s_per_batch") {
    return set_double(s.iteration_time_s);
  }
  if (k == "loss") return set_double(s.loss);
  if (k == "bytes_sent") return set_int64(s.bytes_sent);
  if (k == "bytes_received") return set_int64(s.bytes_received);
  if (k == "gpu_memory_gib") return set_double(s.gpu_memory_gib);
  if (k == "cluster_workers" || k == "workers") return set_int(s.cluster_workers);
  if (k == "communication_time_s") return set_double(s.communication_time_s);
  if (k == "cluster_steps_per_s" || k == "steps_per_s" || k == "value") {
    return set_double(s.cluster_steps_per_s);
  }
  if (k == "accuracy") return set_double(s.accuracy);
  if (k == "parameter_servers") return set_int(s.parameter_servers);
  if (k == "cluster") return (s.cluster = value, absl::OkStatus());
  // A synchronous all-reduce run: its placement (GPUs per instance), the all-reduce's share of the
  // step, the local batch and the ranks under their DDP names.
  if (k == "placement") return (s.placement = value, absl::OkStatus());
  if (k == "sync_time_s" || k == "sync_time") return set_double(s.communication_time_s);
  if (k == "local_batch" || k == "local_bsz") {
    if (auto st = set_int(s.batch_size); !st.ok()) return st;
    if (s.batch_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(k, " = ", value, ": the samples per rank per step, at least 1"));
    }
    return absl::OkStatus();
  }
  if (k == "ranks" || k == "num_replicas") return set_int(s.cluster_workers);
  if (k == "instances" || k == "num_nodes") return set_int(s.instances);
  if (k == "gpus_per_instance") return set_int(s.gpus_per_instance);
  return absl::NotFoundError(absl::StrCat("unknown field ", base::QuotedValue(key)));
}

}  // namespace import_internal

using import_internal::SetField;

absl::StatusOr<std::optional<Sample>> ParseSampleLine(absl::string_view line) {
  const size_t at = line.find(kSampleLineMarker);
  if (at == absl::string_view::npos) return std::optional<Sample>();
  absl::string_view rest = line.substr(at + kSampleLineMarker.size());
  Sample s;
  for (absl::string_view token :
       absl::StrSplit(rest, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(base::QuotedValue(token), ": expected key=value after ", kSampleLineMarker));
    }
    if (auto status = SetField(token.substr(0, eq), token.substr(eq + 1), s); !status.ok()) {
      return status;
    }
  }
  if (auto status = CompletePlacement(s); !status.ok()) return status;
  return std::optional<Sample>(std::move(s));
}

}  // namespace spotdnn::profiler
