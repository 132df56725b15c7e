// CSV headers shared by the importers, and the checkpoint export "Wall Time,Step,SCALAR[,Zone]
// [,Run]" (LogFormat::kTensorBoardCsv without a speed column, with its side files).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
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
#include "profiler/import_internal.h"
#include "profiler/importers.h"

namespace spotdnn::profiler::import_internal {
namespace {

// Sets `value` from `given` unless `given` is `unset`; a set `value` that differs is an error
// naming `field` and both values.
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

// One checkpoint row of a run.
struct Checkpoint {
  size_t line = 0;  // 1-based
  double wall_time_s = 0;
  std::int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
};

}  // namespace

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

}  // namespace spotdnn::profiler::import_internal
