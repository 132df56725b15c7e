// The public Pollux / Sia throughput files (petuum/adaptdl's simulator traces): one synchronous
// data-parallel configuration per row, as synchronous samples (Sample::placement); and their
// validation curves, one training run at one global batch per file.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/text.h"
#include "predictor/types.h"
#include "profiler/import_internal.h"

namespace spotdnn::profiler::import_internal {
namespace {

// A non-negative finite number of column `field`; INVALID_ARGUMENT naming it otherwise.
absl::StatusOr<double> NonNegative(absl::string_view field, absl::string_view text) {
  double v = 0;
  const std::string t(absl::StripAsciiWhitespace(text));
  if (!absl::SimpleAtod(t, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", base::QuotedValue(t), ": not a finite number"));
  }
  if (v < 0) return absl::InvalidArgumentError(absl::StrCat(field, " = ", t, ": negative"));
  return v;
}

// A whole number in [lo, hi] of column `field`.
absl::StatusOr<int> WholeIn(absl::string_view field, absl::string_view text, int lo, int hi) {
  auto v = NonNegative(field, text);
  if (!v.ok()) return v.status();
  if (*v != std::floor(*v) || *v < lo || *v > hi) {
    return absl::InvalidArgumentError(absl::StrFormat("%s = %s: must be a whole number in [%d, %d]",
                                                      field, absl::StripAsciiWhitespace(text), lo,
                                                      hi));
  }
  return static_cast<int>(*v);
}

// Pollux's placement "1134": one digit (1-9) per instance, its GPUs.
absl::StatusOr<std::vector<int>> DigitPlacement(absl::string_view text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  if (t.empty()) return absl::InvalidArgumentError("placement = \"\": empty");
  std::vector<int> out;
  for (char c : t) {
    if (c < '1' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement = ", base::QuotedValue(t), ": ", c == '0' ? "a 0 digit" : "a non-digit",
          " (each digit is the GPUs used on one instance, 1 to 9)"));
    }
    out.push_back(c - '0');
  }
  if (out.size() > static_cast<size_t>(predictor::kMaxClusterSize)) {
    return absl::InvalidArgumentError("placement: too many instances");
  }
  return out;
}

// A parsed row joins the samples; a refused one, named by file and line, stops the import
// (stop_on_error) or is listed and skipped.
absl::Status TakeRow(absl::StatusOr<Sample> sample, absl::string_view source, size_t line,
                     const ImportOptions& options, ImportResult& result) {
  if (!sample.ok()) {
    std::string message = absl::StrCat(source, ":", line, ": ", sample.status().message());
    if (options.stop_on_error) return absl::InvalidArgumentError(message);
    AddError(result, std::move(message));
    return absl::OkStatus();
  }
  result.samples.push_back(*std::move(sample));
  return absl::OkStatus();
}

}  // namespace

bool IsThroughputHeader(absl::string_view header) {
  const std::vector<std::string> c = HeaderColumns(absl::StripSuffix(header, "\r"));
  const bool times = ColumnIndex(c, "local_bsz") >= 0 && ColumnIndex(c, "step_time") >= 0 &&
                     ColumnIndex(c, "sync_time") >= 0;
  if (!times) return false;
  return ColumnIndex(c, "placement") >= 0 ||
         (ColumnIndex(c, "num_nodes") >= 0 && ColumnIndex(c, "num_replicas") >= 0);
}

absl::Status ImportThroughput(const std::vector<absl::string_view>& lines, size_t header_line,
                              absl::string_view source, const ImportOptions& options,
                              ImportResult& result) {
  auto strip_cr = [](absl::string_view l) { return absl::StripSuffix(l, "\r"); };
  if (options.gpu_type.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": a synchronous throughput file (placement or num_nodes,num_replicas with "
                     "local_bsz,step_time,sync_time) does not say its GPUs: give their type "
                     "(--gpu-type, e.g. --gpu-type T4)"));
  }
  const std::vector<std::string> columns = HeaderColumns(strip_cr(lines[header_line]));
  const int placement = ColumnIndex(columns, "placement");
  const int nodes = ColumnIndex(columns, "num_nodes");
  const int replicas = ColumnIndex(columns, "num_replicas");
  const int bsz = ColumnIndex(columns, "local_bsz");
  const int step = ColumnIndex(columns, "step_time");
  const int sync = ColumnIndex(columns, "sync_time");
  const bool by_placement = placement >= 0;
  std::int64_t row = 0;
  for (size_t i = header_line + 1; i < lines.size(); ++i) {
    const absl::string_view line = strip_cr(lines[i]);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    ++row;
    auto parse = [&]() -> absl::StatusOr<Sample> {
      std::vector<absl::string_view> f = absl::StrSplit(line, ',');
      if (f.size() != columns.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("expected %d comma-separated fields as in the header, got %d",
                            columns.size(), f.size()));
      }
      std::vector<int> gpus;
      if (by_placement) {
        auto p = DigitPlacement(f[placement]);
        if (!p.ok()) return p.status();
        gpus = *std::move(p);
      } else {
        auto n = WholeIn("num_nodes", f[nodes], 1, predictor::kMaxClusterSize);
        if (!n.ok()) return n.status();
        auto r = WholeIn("num_replicas", f[replicas], 1, predictor::kMaxClusterSize);
        if (!r.ok()) return r.status();
        if (*r < *n || *r > static_cast<std::int64_t>(*n) * predictor::kMaxGpusPerInstance) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "num_replicas = %d: must be from num_nodes (%d) to %d GPUs per instance", *r, *n,
              predictor::kMaxGpusPerInstance));
        }
        // The replicas spread as evenly as they go: the first instances take one more.
        for (int k = 0; k < *n; ++k) gpus.push_back(*r / *n + (k < *r % *n ? 1 : 0));
      }
      auto b = WholeIn("local_bsz", f[bsz], 1, predictor::kMaxBatchPerGpu);
      if (!b.ok()) return b.status();
      auto step_time = NonNegative("step_time", f[step]);
      if (!step_time.ok()) return step_time.status();
      if (*step_time <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("step_time = ", absl::StripAsciiWhitespace(f[step]), ": must be > 0"));
      }
      auto sync_time = NonNegative("sync_time", f[sync]);
      if (!sync_time.ok()) return sync_time.status();
      if (*sync_time > *step_time) {
        return absl::InvalidArgumentError(
            absl::StrCat("sync_time = ", absl::StripAsciiWhitespace(f[sync]),
                         ": above the step time ", absl::StripAsciiWhitespace(f[step])));
      }
      Sample s;
      s.job_id = options.job_id;
      s.gpu_type = options.gpu_type;
      s.instance_type = options.instance_type;
      s.batch_size = *b;
      s.iteration_time_s = *step_time;
      s.communication_time_s = *sync_time;
      s.placement = PlacementText(gpus);
      for (int k : gpus) s.cluster_workers += k;
      s.worker_id = by_placement ? "placements" : "scalability";
      s.step = row;  // the row: each row is its own configuration
      if (auto st = ValidateSample(s); !st.ok()) return st;
      return s;
    };
    if (auto st = TakeRow(parse(), source, i + 1, options, result); !st.ok()) return st;
  }
  return absl::OkStatus();
}

bool IsValidationCurveHeader(absl::string_view header) {
  const std::vector<std::string> c = HeaderColumns(absl::StripSuffix(header, "\r"));
  return ColumnIndex(c, "progress") >= 0 && ColumnIndex(c, "iteration") >= 0 &&
         ColumnIndex(c, "metric") >= 0;
}

absl::Status ImportValidationCurve(const std::vector<absl::string_view>& lines, size_t header_line,
                                   absl::string_view source, const ImportOptions& options,
                                   ImportResult& result) {
  auto strip_cr = [](absl::string_view l) { return absl::StripSuffix(l, "\r"); };
  // The global batch is in the file's name, validation-<B>.csv; --batch-size may say it instead.
  const std::string stem = std::filesystem::path(std::string(source)).stem().string();
  int batch = 0;
  if (absl::StartsWith(stem, "validation-") &&
      !absl::SimpleAtoi(absl::StripPrefix(stem, "validation-"), &batch)) {
    batch = 0;
  }
  if (batch > 0 && options.batch_size > 0 && batch != options.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": given batch_size = ", options.batch_size,
                     " contradicts the file name (", batch, ", its global batch)"));
  }
  if (batch <= 0) batch = options.batch_size;
  if (batch <= 0 || batch > predictor::kMaxBatchPerGpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": a validation curve (progress,iteration,metric) says its global batch in its file "
        "name, validation-<B>.csv with B in [1, ",
        predictor::kMaxBatchPerGpu, "], or give it (--batch-size B)"));
  }
  // One run per file: the files of a folder share the job given, each under its own name.
  const std::string run = absl::StrCat("validation-", batch);
  const std::string job = options.job_id.empty() ? run : absl::StrCat(options.job_id, "/", run);
  const std::vector<std::string> columns = HeaderColumns(strip_cr(lines[header_line]));
  const int iteration = ColumnIndex(columns, "iteration");
  const int metric = ColumnIndex(columns, "metric");
  StepOrderChecker order;
  for (size_t i = header_line + 1; i < lines.size(); ++i) {
    const absl::string_view line = strip_cr(lines[i]);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    auto parse = [&]() -> absl::StatusOr<Sample> {
      std::vector<absl::string_view> f = absl::StrSplit(line, ',');
      if (f.size() != columns.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("expected %d comma-separated fields as in the header, got %d",
                            columns.size(), f.size()));
      }
      auto step = NonNegative("iteration", f[iteration]);
      if (!step.ok()) return step.status();
      if (*step != std::floor(*step) || *step > 9e15) {
        return absl::InvalidArgumentError(absl::StrCat(
            "iteration = ", absl::StripAsciiWhitespace(f[iteration]), ": not a whole number"));
      }
      double value = 0;
      const std::string text(absl::StripAsciiWhitespace(f[metric]));
      if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("metric = ", base::QuotedValue(text), ": not a finite number"));
      }
      Sample s;
      s.job_id = job;
      s.gpu_type = options.gpu_type;
      s.instance_type = options.instance_type;
      s.batch_size = batch;
      s.cluster_workers = 1;  // one run at the global batch: its steps whatever its cluster
      s.step = static_cast<std::int64_t>(*step);
      s.metrics[std::string(kValidationMetric)] = value;
      if (auto st = ValidateSample(s); !st.ok()) return st;
      if (auto st = order.Check(s); !st.ok()) return st;
      return s;
    };
    if (auto st = TakeRow(parse(), source, i + 1, options, result); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::profiler::import_internal
