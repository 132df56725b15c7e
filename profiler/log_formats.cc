// The log formats an import reads (TensorBoard's scalar export, the spotDNN prototype's worker
// log, CSV with a header, SPOTDNN_SAMPLE lines): detecting them and reading one text (ImportText).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "profiler/import_internal.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

using import_internal::AddError;
using import_internal::FillFromOptions;
using import_internal::ImportCheckpoints;
using import_internal::IsCheckpointHeader;
using import_internal::ParseDouble;
using import_internal::ParseInteger;
using import_internal::ParseSmallInteger;
using import_internal::SetField;
using import_internal::SideFileKind;

// A line parser: fills `sample` from one line, or returns false in `*use` for lines that carry
// no sample (blank, comment, header).
using LineParser = std::function<absl::Status(absl::string_view line, Sample& sample, bool* use)>;

absl::StatusOr<absl::Time> ParseDateTime(absl::string_view text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  absl::Time time;
  std::string err;
  for (const char* format : {"%Y-%m-%d %H:%M:%E*S", "%Y-%m-%dT%H:%M:%E*S", "%Y-%m-%d %H:%M:%E*S%Ez",
                             "%Y-%m-%dT%H:%M:%E*S%Ez", "%Y-%m-%dT%H:%M:%E*SZ"}) {
    if (absl::ParseTime(format, t, absl::UTCTimeZone(), &time, &err)) return time;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("datetime = ", base::QuotedValue(t), ": expected YYYY-MM-DD HH:MM:SS[.fff]"));
}

// The tag of a TensorBoard scalar export, from the name TensorBoard gives the download
// ("run-train-tag-accuracy.csv" -> "accuracy", '/' in the tag written '_'); "" when the name
// does not say.
std::string TensorBoardTag(absl::string_view source) {
  const size_t slash = source.find_last_of('/');
  absl::string_view name = slash == absl::string_view::npos ? source : source.substr(slash + 1);
  const size_t at = name.rfind("-tag-");
  if (at == absl::string_view::npos) return "";
  name = name.substr(at + 5);
  absl::ConsumeSuffix(&name, ".csv");
  return std::string(name);
}

// Where a TensorBoard export's Value goes, by its tag: the cluster's steps/s (global_step/sec,
// or no tag), the loss, the accuracy (a tag ending in "accuracy", "eval_accuracy"), or else
// Sample.metrics under the tag.
void SetTensorBoardValue(const std::string& tag, double value, Sample& s) {
  const std::string lower = absl::AsciiStrToLower(tag);
  if (lower.empty() || absl::StrContains(lower, "global_step") ||
      absl::StrContains(lower, "steps_per_sec")) {
    s.cluster_steps_per_s = value;
  } else if (lower == "loss" || absl::EndsWith(lower, "_loss") || absl::EndsWith(lower, ".loss")) {
    s.loss = value;
  } else if (lower == "accuracy" || absl::EndsWith(lower, "_accuracy") ||
             absl::EndsWith(lower, ".accuracy")) {
    s.accuracy = value;
  } else {
    s.metrics[tag] = value;
  }
}

// TensorBoard's scalar export: the header names the columns; the file's name, the tag (see
// SetTensorBoardValue).
absl::StatusOr<LineParser> TensorBoardParser(absl::string_view header, const std::string& tag) {
  std::vector<std::string> columns;
  for (absl::string_view c : absl::StrSplit(header, ',')) {
    columns.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(c)));
  }
  int wall = -1, step = -1, value = -1, step_time = -1;
  for (int i = 0; i < static_cast<int>(columns.size()); ++i) {
    if (columns[i] == "wall time") wall = i;
    if (columns[i] == "step") step = i;
    if (columns[i] == "value") value = i;
    if (columns[i] == "step time") step_time = i;
  }
  if (wall < 0 || step < 0 || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header \"", header, "\": a TensorBoard export has the columns Wall time,Step,Value"));
  }
  const size_t n = columns.size();
  return LineParser([=](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expected %d comma-separated fields, got %d", n, f.size()));
    }
    auto w = ParseDouble("Wall time", f[wall]);
    if (!w.ok()) return w.status();
    auto st = ParseInteger("Step", f[step]);
    if (!st.ok()) return st.status();
    auto v = ParseDouble("Value", f[value]);
    if (!v.ok()) return v.status();
    s.wall_time_s = *w;
    s.step = *st;
    SetTensorBoardValue(tag, *v, s);
    if (step_time >= 0 && !absl::StripAsciiWhitespace(f[step_time]).empty()) {
      auto t = ParseDouble("Step Time", f[step_time]);
      if (!t.ok()) return t.status();
      s.iteration_time_s = *t;
    }
    *use = true;
    return absl::OkStatus();
  });
}

// The spotDNN prototype's worker log: datetime, global step, images (the batch), loss,
// examples/s, s/batch; tab separated. A header line starting with a non-date is skipped.
LineParser SpotdnnWorkerParser() {
  return [](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    while (!f.empty() && absl::StripAsciiWhitespace(f.back()).empty()) f.pop_back();
    if (f.size() != 6) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected 6 tab-separated fields (datetime, global step, images, loss, examples/s, "
          "s/batch), got %d",
          f.size()));
    }
    auto time = ParseDateTime(f[0]);
    if (!time.ok()) return time.status();
    auto step = ParseInteger("global step", f[1]);
    if (!step.ok()) return step.status();
    auto images = ParseSmallInteger("images", f[2]);
    if (!images.ok()) return images.status();
    auto loss = ParseDouble("loss", f[3]);
    if (!loss.ok()) return loss.status();
    auto examples = ParseDouble("examples/s", f[4]);
    if (!examples.ok()) return examples.status();
    auto seconds = ParseDouble("s/batch", f[5]);
    if (!seconds.ok()) return seconds.status();
    s.wall_time_s = absl::ToDoubleSeconds(*time - absl::UnixEpoch());
    s.step = *step;
    s.batch_size = *images;
    s.loss = *loss;
    s.iteration_time_s = *seconds;
    if (!std::isfinite(*examples) || *examples < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("examples/s = %g: must be finite and not negative", *examples));
    }
    *use = true;
    return absl::OkStatus();
  };
}

absl::StatusOr<LineParser> CsvParser(absl::string_view header) {
  std::vector<std::string> columns;
  for (absl::string_view c : absl::StrSplit(header, ',')) columns.emplace_back(c);
  int known = 0;
  std::vector<bool> use_column;
  for (const std::string& c : columns) {
    Sample probe;
    const absl::Status s = SetField(c, "0", probe);
    use_column.push_back(!absl::IsNotFound(s));
    known += use_column.back() ? 1 : 0;
  }
  if (known == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("header \"", header,
                     "\": names no sample field (e.g. step, wall_time_s, iteration_time_s, loss)"));
  }
  return LineParser([=](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != columns.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected %d comma-separated fields as in the header, got %d", columns.size(), f.size()));
    }
    for (size_t i = 0; i < f.size(); ++i) {
      if (!use_column[i] || absl::StripAsciiWhitespace(f[i]).empty()) continue;
      if (auto status = SetField(columns[i], f[i], s); !status.ok()) return status;
    }
    if (auto status = CompletePlacement(s); !status.ok()) return status;
    *use = true;
    return absl::OkStatus();
  });
}

LineParser SampleLineParser() {
  return [](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    absl::StatusOr<std::optional<Sample>> parsed = ParseSampleLine(line);
    if (!parsed.ok()) return parsed.status();
    if (!parsed->has_value()) return absl::OkStatus();  // other log output
    // The line's fields, with the import's job id when the line names none.
    Sample line_sample = **std::move(parsed);
    if (line_sample.job_id.empty()) line_sample.job_id = s.job_id;
    s = std::move(line_sample);
    *use = true;
    return absl::OkStatus();
  };
}

LogFormat DetectFormat(absl::string_view first_line, absl::string_view content) {
  if (absl::StrContains(content, kSampleLineMarker)) return LogFormat::kSampleLines;
  const std::string lower = absl::AsciiStrToLower(first_line);
  if (absl::StartsWith(lower, "wall time,")) return LogFormat::kTensorBoardCsv;
  if (absl::StrContains(first_line, '\t')) return LogFormat::kSpotdnnWorker;
  return LogFormat::kCsv;
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  for (LogFormat f : {LogFormat::kAuto, LogFormat::kTensorBoardCsv, LogFormat::kSpotdnnWorker,
                      LogFormat::kCsv, LogFormat::kSampleLines}) {
    if (name == LogFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "format = \"", name, "\": expected auto, tensorboard, spotdnn-worker, csv or samples"));
}

absl::string_view LogFormatName(LogFormat format) {
  switch (format) {
    case LogFormat::kAuto:
      return "auto";
    case LogFormat::kTensorBoardCsv:
      return "tensorboard";
    case LogFormat::kSpotdnnWorker:
      return "spotdnn-worker";
    case LogFormat::kCsv:
      return "csv";
    case LogFormat::kSampleLines:
      return "samples";
  }
  return "auto";
}

absl::StatusOr<ImportResult> ImportText(absl::string_view content, absl::string_view source,
                                        const ImportOptions& options) {
  ImportResult result;
  result.files = 1;
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  // The first line that is not blank.
  size_t first = 0;
  while (first < lines.size() && absl::StripAsciiWhitespace(lines[first]).empty()) ++first;
  if (first == lines.size()) return result;  // an empty file holds no samples
  auto strip_cr = [](absl::string_view l) { return absl::StripSuffix(l, "\r"); };
  const absl::string_view first_line = strip_cr(lines[first]);

  if (const std::string kind = SideFileKind(first_line);
      !kind.empty() && (options.format == LogFormat::kAuto || options.format == LogFormat::kCsv)) {
    result.notes.push_back(
        absl::StrCat(source, ": ", kind, " of a checkpoint export, not samples"));
    return result;
  }
  if (import_internal::IsThroughputHeader(first_line) &&
      (options.format == LogFormat::kAuto || options.format == LogFormat::kCsv)) {
    if (auto s = import_internal::ImportThroughput(lines, first, source, options, result);
        !s.ok()) {
      return s;
    }
    return result;
  }
  if (import_internal::IsValidationCurveHeader(first_line) &&
      (options.format == LogFormat::kAuto || options.format == LogFormat::kCsv)) {
    if (auto s = import_internal::ImportValidationCurve(lines, first, source, options, result);
        !s.ok()) {
      return s;
    }
    return result;
  }
  LogFormat format = options.format;
  if (format == LogFormat::kAuto) format = DetectFormat(first_line, content);
  if (format == LogFormat::kTensorBoardCsv && IsCheckpointHeader(first_line)) {
    if (auto s = ImportCheckpoints(lines, first, source, options, result); !s.ok()) return s;
    return result;
  }
  LineParser parser;
  size_t body = first;  // first line that holds data
  switch (format) {
    case LogFormat::kTensorBoardCsv:
    case LogFormat::kCsv: {
      auto p = format == LogFormat::kCsv ? CsvParser(first_line)
                                         : TensorBoardParser(first_line, TensorBoardTag(source));
      if (!p.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", first + 1, ": ", p.status().message()));
      }
      parser = *std::move(p);
      body = first + 1;
      break;
    }
    case LogFormat::kSpotdnnWorker:
      parser = SpotdnnWorkerParser();
      // A header line (its first field is not a date) is skipped.
      if (!ParseDateTime(std::vector<absl::string_view>(absl::StrSplit(first_line, '\t'))[0])
               .ok() &&
          !absl::StrContains(first_line, "SPOTDNN")) {
        std::string lower = absl::AsciiStrToLower(first_line);
        if (absl::StrContains(lower, "step")) body = first + 1;
      }
      break;
    case LogFormat::kSampleLines:
    case LogFormat::kAuto:
      parser = SampleLineParser();
      break;
  }

  StepOrderChecker order;
  for (size_t i = body; i < lines.size(); ++i) {
    const absl::string_view line = strip_cr(lines[i]);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || (format != LogFormat::kSampleLines && trimmed[0] == '#')) continue;
    Sample s;
    s.job_id = options.job_id;
    bool use = false;
    absl::Status status = parser(line, s, &use);
    if (status.ok() && !use) continue;
    if (status.ok()) status = FillFromOptions(options, s);
    if (status.ok()) status = ValidateSample(s);
    if (status.ok()) status = order.Check(s);
    if (!status.ok()) {
      std::string message = absl::StrCat(source, ":", i + 1, ": ", status.message());
      if (options.stop_on_error) return absl::InvalidArgumentError(message);
      AddError(result, std::move(message));
      continue;
    }
    result.samples.push_back(std::move(s));
  }
  return result;
}

}  // namespace spotdnn::profiler
