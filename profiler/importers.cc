#include "profiler/importers.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace spotdnn::profiler {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kSampleMarker = kSampleLineMarker;

absl::StatusOr<double> ParseDouble(absl::string_view field, absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  double value = 0;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (!absl::SimpleAtod(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\": not a number"));
  }
  return value;
}

absl::StatusOr<std::int64_t> ParseInteger(absl::string_view field, absl::string_view text) {
  auto value = ParseDouble(field, text);
  if (!value.ok()) return value.status();
  if (!std::isfinite(*value) || *value != std::floor(*value) || std::fabs(*value) > 9e15) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", absl::StripAsciiWhitespace(text), "\": not a whole number"));
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
  return absl::NotFoundError(absl::StrCat("unknown field \"", key, "\""));
}

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
      absl::StrCat("datetime = \"", t, "\": expected YYYY-MM-DD HH:MM:SS[.fff]"));
}

// TensorBoard's scalar export: the header names the columns.
absl::StatusOr<LineParser> TensorBoardParser(absl::string_view header) {
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
    s.cluster_steps_per_s = *v;
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
  if (absl::StrContains(content, kSampleMarker)) return LogFormat::kSampleLines;
  const std::string lower = absl::AsciiStrToLower(first_line);
  if (absl::StartsWith(lower, "wall time,")) return LogFormat::kTensorBoardCsv;
  if (absl::StrContains(first_line, '\t')) return LogFormat::kSpotdnnWorker;
  return LogFormat::kCsv;
}

void AddError(ImportResult& result, std::string message) {
  ++result.skipped;
  if (static_cast<int>(result.errors.size()) < kMaxImportErrors) {
    result.errors.push_back(std::move(message));
  }
}

std::vector<std::string> HeaderColumns(absl::string_view header) {
  std::vector<std::string> columns;
  for (absl::string_view c : absl::StrSplit(header, ',')) {
    columns.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(c)));
  }
  return columns;
}

int ColumnIndex(const std::vector<std::string>& columns, absl::string_view name) {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// A TensorBoard-style export without a speed column: one row per checkpoint.
bool IsCheckpointHeader(absl::string_view header) {
  const std::vector<std::string> c = HeaderColumns(header);
  return ColumnIndex(c, "wall time") >= 0 && ColumnIndex(c, "step") >= 0 &&
         ColumnIndex(c, "value") < 0;
}

// What a side file of a checkpoint export holds, or "" when the header is not one.
std::string SideFileKind(absl::string_view header) {
  const std::vector<std::string> c = HeaderColumns(header);
  if (ColumnIndex(c, "vm_name") >= 0) return "per-VM uptimes";
  if (ColumnIndex(c, "duration") >= 0 && ColumnIndex(c, "run") >= 0) return "per-run durations";
  if (ColumnIndex(c, "cost") >= 0 && ColumnIndex(c, "run") >= 0) {
    for (const std::string& column : c) {
      if (column != "zone" && column != "run" && column != "cost") return "";
    }
    return "per-run costs";
  }
  return "";
}

template <typename T>
absl::Status FillOne(absl::string_view field, T& value, const T& given, const T& unset) {
  if (given == unset) return absl::OkStatus();
  if (value == unset) {
    value = given;
    return absl::OkStatus();
  }
  if (value != given) {
    return absl::InvalidArgumentError(absl::StrCat(
        "given ", field, " = ", given, " contradicts the file's ", field, " = ", value));
  }
  return absl::OkStatus();
}

// Fills what a sample does not say from the options; a given value the sample says otherwise is
// an error naming both.
absl::Status FillFromOptions(const ImportOptions& o, Sample& s) {
  for (auto status :
       {FillOne<std::string>("instance_type", s.instance_type, o.instance_type, ""),
        FillOne<std::string>("gpu_type", s.gpu_type, o.gpu_type, ""),
        FillOne("gpus", s.gpus, o.gpus, 0), FillOne("batch_size", s.batch_size, o.batch_size, 0),
        FillOne("cluster_workers", s.cluster_workers, o.cluster_workers, 0),
        FillOne("parameter_servers", s.parameter_servers, o.parameter_servers, 0),
        FillOne<std::string>("cluster", s.cluster, o.cluster, "")}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// One checkpoint row of a run.
struct Checkpoint {
  size_t line = 0;  // 1-based
  double wall_time_s = 0;
  std::int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
};

// The checkpoint export "Wall Time,Step,SCALAR[,Zone][,Run]" (see LogFormat::kTensorBoardCsv).
absl::Status ImportCheckpoints(const std::vector<absl::string_view>& lines, size_t header_line,
                               absl::string_view source, const ImportOptions& options,
                               ImportResult& result) {
  auto strip_cr = [](absl::string_view l) { return absl::StripSuffix(l, "\r"); };
  const std::vector<std::string> columns = HeaderColumns(strip_cr(lines[header_line]));
  const int wall = ColumnIndex(columns, "wall time");
  const int step = ColumnIndex(columns, "step");
  const int run_col = ColumnIndex(columns, "run");
  const int zone_col = ColumnIndex(columns, "zone");
  const int accuracy = ColumnIndex(columns, "accuracy");
  const int loss = ColumnIndex(columns, "loss");
  auto fail = [&](size_t line, absl::string_view why) -> absl::Status {
    std::string message = absl::StrCat(source, ":", line, ": ", why);
    if (options.stop_on_error) return absl::InvalidArgumentError(message);
    AddError(result, std::move(message));
    return absl::OkStatus();
  };
  // Runs in order of first appearance, keyed by (zone, run).
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::vector<Checkpoint>> runs;
  for (size_t i = header_line + 1; i < lines.size(); ++i) {
    const absl::string_view line = strip_cr(lines[i]);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != columns.size()) {
      if (auto s = fail(i + 1, absl::StrFormat("expected %d comma-separated fields as in the "
                                               "header, got %d",
                                               columns.size(), f.size()));
          !s.ok()) {
        return s;
      }
      continue;
    }
    Checkpoint c;
    c.line = i + 1;
    absl::Status status;
    if (auto w = ParseDouble("Wall Time", f[wall]); w.ok()) {
      c.wall_time_s = *w;
    } else {
      status = w.status();
    }
    if (auto st = ParseInteger("Step", f[step]); status.ok() && st.ok()) {
      c.step = *st;
    } else if (status.ok()) {
      status = st.status();
    }
    for (auto [index, name, out] :
         {std::tuple{accuracy, "Accuracy", &c.accuracy}, std::tuple{loss, "Loss", &c.loss}}) {
      if (index < 0 || !status.ok() || absl::StripAsciiWhitespace(f[index]).empty()) continue;
      auto v = ParseDouble(name, f[index]);
      if (v.ok()) {
        *out = *v;
      } else {
        status = v.status();
      }
    }
    if (status.ok()) {
      for (auto [name, v] : {std::pair{"Wall Time", c.wall_time_s},
                             std::pair{"Accuracy", c.accuracy}, std::pair{"Loss", c.loss}}) {
        if (!std::isfinite(v) || v < 0) {
          status = absl::InvalidArgumentError(
              absl::StrFormat("%s = %g: must be a finite number >= 0", name, v));
          break;
        }
      }
      if (status.ok() && c.step < 0) {
        status = absl::InvalidArgumentError(absl::StrCat("Step = ", c.step, ": must be >= 0"));
      }
    }
    if (!status.ok()) {
      if (auto s = fail(i + 1, status.message()); !s.ok()) return s;
      continue;
    }
    std::pair<std::string, std::string> key{
        zone_col >= 0 ? std::string(absl::StripAsciiWhitespace(f[zone_col])) : "",
        run_col >= 0 ? std::string(absl::StripAsciiWhitespace(f[run_col])) : ""};
    auto [it, fresh] = runs.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(c);
  }
  for (const auto& key : order) {
    const auto& [zone, run] = key;
    const std::string name = zone.empty() ? run : absl::StrCat(zone, "/", run);
    std::vector<Checkpoint>& rows = runs[key];
    // A VM lost mid-run (vm_data.csv): the cluster shrank, so the run's speed is not its own.
    const RunToLeaveOut* leave = nullptr;
    for (const RunToLeaveOut& l : options.leave_out) {
      if (!run.empty() && l.run == run && (zone.empty() || absl::EndsWith(l.vm_prefix, zone))) {
        leave = &l;
      }
    }
    if (leave != nullptr) {
      result.notes.push_back(absl::StrCat(source, ": run ", name, " (", rows.size(),
                                          " checkpoints) left out: ", leave->reason));
      result.skipped += rows.size();
      continue;
    }
    // Checkpoints must move forward: a wall time going back is skipped; a step that does not
    // increase is a restart, and the run's speed is measured from there.
    std::vector<Checkpoint> kept;
    for (const Checkpoint& c : rows) {
      if (!kept.empty() && c.wall_time_s < kept.back().wall_time_s) {
        if (auto s = fail(
                c.line, absl::StrFormat("Wall Time %.6f goes backwards (line %d has "
                                        "%.6f)",
                                        c.wall_time_s, kept.back().line, kept.back().wall_time_s));
            !s.ok()) {
          return s;
        }
        continue;
      }
      if (!kept.empty() && c.step <= kept.back().step) {
        if (auto s =
                fail(c.line, absl::StrFormat("Step %d does not increase (line %d has step %d): run "
                                             "%s restarted here; its %d earlier checkpoint(s) are "
                                             "left out",
                                             c.step, kept.back().line, kept.back().step,
                                             name.empty() ? "of the file" : name, kept.size()));
            !s.ok()) {
          return s;
        }
        kept.clear();
      }
      kept.push_back(c);
    }
    if (kept.size() < 2) {
      if (auto s = fail(rows.back().line,
                        absl::StrFormat("run %s has %d usable checkpoint(s): a speed needs at "
                                        "least two",
                                        name.empty() ? "of the file" : name, kept.size()));
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (kept.back().wall_time_s <= kept.front().wall_time_s) {
      if (auto s = fail(kept.back().line,
                        absl::StrFormat("run %s: its checkpoints span no wall time, so it has no "
                                        "speed",
                                        name.empty() ? "of the file" : name));
          !s.ok()) {
        return s;
      }
      continue;
    }
    std::string job = options.job_id;
    if (!run.empty()) {
      const std::string leaf = absl::StrCat(zone.empty() ? "" : zone + "/", "run-", run);
      job = job.empty() ? leaf : absl::StrCat(job, "/", leaf);
    }
    std::vector<Sample> samples;
    for (size_t i = 0; i < kept.size(); ++i) {
      Sample s;
      s.job_id = job;
      s.step = kept[i].step;
      s.wall_time_s = kept[i].wall_time_s;
      s.accuracy = kept[i].accuracy;
      s.loss = kept[i].loss;
      if (i > 0 && kept[i].wall_time_s > kept[i - 1].wall_time_s) {
        s.cluster_steps_per_s =
            (kept[i].step - kept[i - 1].step) / (kept[i].wall_time_s - kept[i - 1].wall_time_s);
      }
      absl::Status status = FillFromOptions(options, s);
      if (status.ok()) status = ValidateSample(s);
      if (!status.ok()) {
        // A flag that contradicts the file, or a bad value: the whole run goes.
        if (auto f = fail(kept[i].line, status.message()); !f.ok()) return f;
        samples.clear();
        break;
      }
      samples.push_back(std::move(s));
    }
    result.samples.insert(result.samples.end(), std::make_move_iterator(samples.begin()),
                          std::make_move_iterator(samples.end()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<Sample>> ParseSampleLine(absl::string_view line) {
  const size_t at = line.find(kSampleMarker);
  if (at == absl::string_view::npos) return std::optional<Sample>();
  absl::string_view rest = line.substr(at + kSampleMarker.size());
  Sample s;
  for (absl::string_view token :
       absl::StrSplit(rest, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", token, "\": expected key=value after ", kSampleMarker));
    }
    if (auto status = SetField(token.substr(0, eq), token.substr(eq + 1), s); !status.ok()) {
      return status;
    }
  }
  return std::optional<Sample>(std::move(s));
}

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

bool ParseRunFolderName(absl::string_view name, std::string* series, int* workers) {
  const size_t at = name.rfind("worker");
  if (at == absl::string_view::npos || at == 0) return false;
  absl::string_view digits = name.substr(at + 6);
  int n = 0;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
      !absl::SimpleAtoi(digits, &n) || n <= 0) {
    return false;
  }
  *series = std::string(name.substr(0, at));
  *workers = n;
  return true;
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
      auto p = format == LogFormat::kCsv ? CsvParser(first_line) : TensorBoardParser(first_line);
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

namespace {

// Opens `path` for reading; without symlinks, no component of it may be one (openat2's
// RESOLVE_NO_SYMLINKS where the kernel has it, else O_NOFOLLOW on the last component) and a FIFO
// does not block the open.
int OpenForImport(const fs::path& path, bool follow_symlinks) {
  if (follow_symlinks) return open(path.c_str(), O_RDONLY | O_CLOEXEC);
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how));
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

// The file's content, at most `*budget` bytes (which it uses up), as `access` allows.
absl::StatusOr<std::string> ReadWholeFile(const fs::path& path, const FileAccess& access,
                                          std::uint64_t* budget) {
  const int fd = OpenForImport(path, access.follow_symlinks);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::PermissionDeniedError(
          absl::StrCat(path.string(), ": a symbolic link is in the path; not followed"));
    }
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": cannot be read: ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot be read"));
  }
  if (!access.follow_symlinks && !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), ": not a regular file (a device, FIFO or socket)"));
  }
  auto too_big = [&](std::uint64_t size) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", size,
                                                   " bytes or more, above what is left of the "
                                                   "import limit (",
                                                   *budget, " bytes)"));
  };
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > *budget) {
    return too_big(st.st_size);
  }
  std::string content;
  if (S_ISREG(st.st_mode)) content.reserve(st.st_size);
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::NotFoundError(
          absl::StrCat(path.string(), ": cannot be read: ", std::strerror(errno)));
    }
    if (n == 0) break;
    if (content.size() + n > *budget) return too_big(content.size() + n);
    content.append(buffer, n);
  }
  *budget -= content.size();
  return content;
}

bool IsLogFile(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".csv" || ext == ".log" || ext == ".txt" || ext == ".tsv";
}

void Merge(ImportResult& into, ImportResult&& from) {
  into.files += from.files;
  into.skipped += from.skipped;
  into.notes.insert(into.notes.end(), from.notes.begin(), from.notes.end());
  for (std::string& e : from.errors) {
    if (static_cast<int>(into.errors.size()) < kMaxImportErrors)
      into.errors.push_back(std::move(e));
  }
  into.samples.insert(into.samples.end(), std::make_move_iterator(from.samples.begin()),
                      std::make_move_iterator(from.samples.end()));
}

}  // namespace

bool ParseFolderContext(absl::string_view name, FolderContext* context) {
  std::string series;
  int workers = 0;
  if (ParseRunFolderName(name, &series, &workers)) {
    *context = FolderContext{.workers = workers};
    return true;
  }
  // "<P>ps<N><g>": P parameter servers, N workers of GPU g (k, p, v).
  const size_t ps = name.find("ps");
  if (ps == absl::string_view::npos || ps == 0 || name.size() < ps + 4) return false;
  const absl::string_view p = name.substr(0, ps);
  const absl::string_view n = name.substr(ps + 2, name.size() - ps - 3);
  const char g = name.back();
  int servers = 0;
  if (!std::all_of(p.begin(), p.end(), ::isdigit) || !std::all_of(n.begin(), n.end(), ::isdigit) ||
      !absl::SimpleAtoi(p, &servers) || !absl::SimpleAtoi(n, &workers) || servers < 1 ||
      workers < 1) {
    return false;
  }
  const char* gpu = g == 'k' ? "K80" : g == 'p' ? "P100" : g == 'v' ? "V100" : nullptr;
  if (gpu == nullptr) return false;
  *context = FolderContext{.workers = workers, .parameter_servers = servers, .gpu_type = gpu};
  return true;
}

std::vector<RunToLeaveOut> RunsWithRevokedVms(absl::string_view content, absl::string_view source) {
  std::vector<RunToLeaveOut> out;
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  if (lines.empty()) return out;
  const std::vector<std::string> columns = HeaderColumns(absl::StripSuffix(lines[0], "\r"));
  const int name_col = ColumnIndex(columns, "vm_name");
  const int status_col = ColumnIndex(columns, "revoked");
  if (name_col < 0 || status_col < 0) return out;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(absl::StripSuffix(lines[i], "\r"), ',');
    if (f.size() <= static_cast<size_t>(std::max(name_col, status_col))) continue;
    // "Revoked": this VM was lost while the run went on ("Manually stopped due to revoked
    // master" stops the whole run at once, which leaves its speed until then intact).
    if (absl::AsciiStrToLower(absl::StripAsciiWhitespace(f[status_col])) != "revoked") continue;
    const std::string vm(absl::StripAsciiWhitespace(f[name_col]));
    // "<prefix>-run<N>-<role>" or "run<N>-<role>".
    size_t at = vm.find("-run");
    size_t digits = at == std::string::npos ? std::string::npos : at + 4;
    if (at == std::string::npos && absl::StartsWith(vm, "run")) {
      at = 0;
      digits = 3;
    }
    if (digits == std::string::npos) continue;
    size_t end = digits;
    while (end < vm.size() && std::isdigit(static_cast<unsigned char>(vm[end]))) ++end;
    if (end == digits) continue;
    RunToLeaveOut r;
    r.run = vm.substr(digits, end - digits);
    r.vm_prefix = vm.substr(0, at);
    r.reason = absl::StrCat(source, ":", i + 1, " says ", vm,
                            " was revoked mid-run, so the cluster shrank and the run's speed is "
                            "not that of its cluster");
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Values the folder's name gives, unless the options give them; the options saying otherwise is
// an error naming both.
absl::Status ApplyFolderContext(const std::string& folder, ImportOptions& o) {
  FolderContext context;
  if (!ParseFolderContext(folder, &context)) return absl::OkStatus();
  auto apply = [&](absl::string_view field, auto& value, const auto& said, const auto& unset,
                   absl::string_view what) -> absl::Status {
    if (said == unset) return absl::OkStatus();
    if (value == unset) {
      value = said;
      return absl::OkStatus();
    }
    if (value != said) {
      return absl::InvalidArgumentError(absl::StrCat("given ", field, " = ", value,
                                                     " contradicts the run folder \"", folder,
                                                     "\" (", said, " ", what, ")"));
    }
    return absl::OkStatus();
  };
  if (!o.cluster.empty()) return absl::OkStatus();  // a composition speaks for itself
  if (auto s = apply("cluster_workers", o.cluster_workers, context.workers, 0, "workers");
      !s.ok()) {
    return s;
  }
  if (auto s = apply("parameter_servers", o.parameter_servers, context.parameter_servers, 0,
                     "parameter servers");
      !s.ok()) {
    return s;
  }
  return apply("gpu_type", o.gpu_type, context.gpu_type, std::string(), "GPUs");
}

// The runs a vm_data.csv in `dir` says lost a VM mid-run (none when there is no such file, or
// `access` does not let it be read: a symbolic link, say). Read once per folder (`cache`), from
// the import's byte budget; going past that budget is the one error.
absl::StatusOr<std::vector<RunToLeaveOut>> LeaveOutFrom(
    const fs::path& dir, const FileAccess& access, std::uint64_t* budget,
    std::map<fs::path, std::vector<RunToLeaveOut>>& cache) {
  if (auto it = cache.find(dir); it != cache.end()) return it->second;
  std::vector<RunToLeaveOut>& out = cache[dir];
  const fs::path vm_data = dir / "vm_data.csv";
  std::error_code ec;
  const fs::file_status status =
      access.follow_symlinks ? fs::status(vm_data, ec) : fs::symlink_status(vm_data, ec);
  if (!fs::is_regular_file(status)) return out;
  auto content = ReadWholeFile(vm_data, access, budget);
  if (absl::IsInvalidArgument(content.status())) return content.status();
  if (!content.ok()) return out;
  out = RunsWithRevokedVms(*content, vm_data.string());
  return out;
}

}  // namespace

absl::StatusOr<ImportResult> ImportPath(const std::string& path, const ImportOptions& options,
                                        const FileAccess& access) {
  std::uint64_t budget = access.max_bytes;
  std::map<fs::path, std::vector<RunToLeaveOut>> leave_out;  // by folder
  std::error_code ec;
  const fs::path root(path);
  if (!fs::exists(root, ec)) {
    return absl::NotFoundError(absl::StrCat("path = \"", path, "\": no such file or folder"));
  }
  if (!fs::is_directory(root, ec)) {
    ImportOptions o = options;
    std::string series;
    int workers = 0;
    const std::string parent = root.parent_path().filename().string();
    if (auto s = ApplyFolderContext(parent, o); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
    if (ParseRunFolderName(parent, &series, &workers) && o.job_id.empty()) o.job_id = parent;
    if (o.leave_out.empty()) {
      auto leave = LeaveOutFrom(root.parent_path(), access, &budget, leave_out);
      if (!leave.ok()) return leave.status();
      o.leave_out = *std::move(leave);
    }
    auto content = ReadWholeFile(root, access, &budget);
    if (!content.ok()) return content.status();
    return ImportText(*content, path, o);
  }
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    // Without symlinks, a link is not followed even to a regular file.
    const bool regular = access.follow_symlinks ? it->is_regular_file(ec)
                                                : fs::is_regular_file(it->symlink_status(ec));
    if (regular && IsLogFile(it->path())) files.push_back(it->path());
    if (static_cast<std::uint64_t>(files.size()) > static_cast<std::uint64_t>(access.max_files)) {
      return absl::InvalidArgumentError(absl::StrCat("path = \"", path, "\": more than ",
                                                     access.max_files, " log files; import fewer"));
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  ImportResult result;
  for (const fs::path& file : files) {
    ImportOptions o = options;
    const fs::path relative = file.parent_path().lexically_relative(root);
    if (!relative.empty() && relative != ".") {
      o.job_id = options.job_id.empty()
                     ? relative.generic_string()
                     : absl::StrCat(options.job_id, "/", relative.generic_string());
      // The nearest enclosing run folder says how many workers trained together.
      for (fs::path p = relative; !p.empty() && p != "."; p = p.parent_path()) {
        FolderContext context;
        if (ParseFolderContext(p.filename().string(), &context)) {
          if (auto s = ApplyFolderContext(p.filename().string(), o); !s.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", s.message()));
          }
          break;
        }
        if (p.parent_path() == p) break;
      }
    } else if (auto s = ApplyFolderContext(root.lexically_normal().filename().string(), o);
               !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", s.message()));
    }
    if (access.stop) {
      if (auto s = access.stop(); !s.ok()) return s;
    }
    if (o.leave_out.empty()) {
      auto leave = LeaveOutFrom(file.parent_path(), access, &budget, leave_out);
      if (!leave.ok()) return leave.status();
      o.leave_out = *std::move(leave);
    }
    auto content = ReadWholeFile(file, access, &budget);
    if (!content.ok()) return content.status();
    auto one = ImportText(*content, file.string(), o);
    if (!one.ok()) return one.status();
    Merge(result, *std::move(one));
  }
  return result;
}

}  // namespace spotdnn::profiler
