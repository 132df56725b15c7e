// spotdnn profile validate: fit on one set of jobs, predict every cluster of another from its
// composition, and compare with what those runs measured; and spotdnn profile validate-speed: fit
// the cluster-speed curve on some cluster sizes of local runs and predict the others.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "predictor/types.h"
#include "profiler/allreduce_fit.h"
#include "profiler/batch_scaling.h"
#include "profiler/convergence_validate.h"
#include "profiler/importers.h"
#include "profiler/speed_curve.h"
#include "services/common/convert.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

std::string Composition(const pb::Cluster& cluster) {
  std::vector<std::string> parts;
  for (const pb::InstanceCount& c : cluster.instances()) {
    parts.push_back(absl::StrCat(c.instance_type(), "=", c.count()));
  }
  return absl::StrCat(absl::StrJoin(parts, ","), ", ", cluster.parameter_servers(), " PS");
}

std::string JsonNumber(double v) { return absl::StrFormat("%.6g", v); }

}  // namespace

int ProfileValidateCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile validate", io); };
  pb::ValidateProfileRequest request;
  for (const auto& [flag, ids] : {std::pair{"--fit", request.mutable_fit_job_ids()},
                                  std::pair{"--check", request.mutable_check_job_ids()}}) {
    auto value = args.Required(flag);
    if (!value.ok()) return fail(value.status());
    for (absl::string_view j : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
      ids->Add(std::string(j));
    }
    if (ids->empty()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(flag, " = \"", *value, "\": name at least one job")));
    }
  }
  if (auto ps = args.Get("--ps-bandwidth")) {
    auto v = ParseNumber("--ps-bandwidth", *ps);
    if (!v.ok()) return fail(v.status());
    request.set_parameter_server_bandwidth_mb_per_s(*v);
  }
  if (auto variant = args.Get("--model-variant")) {
    auto v = predictor::ParseVariant(*variant);
    if (!v.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("--", v.status().message())));
    request.set_model_variant(services::ToProto(*v));
  }
  if (auto base = args.Get("--base")) {
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    auto profile = local.ResolveWorkload(*base);
    if (!profile.ok()) return fail(profile.status());
    *request.mutable_base() = *std::move(profile);
  }
  if (auto n = args.Get("--iterations")) {
    auto v = ParseNumber("--iterations", *n);
    if (!v.ok()) return fail(v.status());
    if (!(*v >= 1)) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--iterations = \"", *n, "\": must be a number of steps >= 1")));
    }
    request.set_iterations(*v);
  }
  pb::ValidateProfileResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  if (auto s = services::FromGrpc(stub.ValidateProfile(&context, request, &response)); !s.ok()) {
    return fail(s);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  io.out << "Fitted on " << absl::StrJoin(request.fit_job_ids(), ",") << " ("
         << predictor::VariantName(services::ToDomain(response.profile().model_variant()))
         << "), predicted " << absl::StrJoin(request.check_job_ids(), ",") << "\n\n";
  Table quality({"parameter", "identified", "note"});
  quality.LeftAlign(0);
  quality.LeftAlign(2);
  for (const pb::FitQuality& q : response.quality()) {
    quality.AddRow({q.parameter(), q.identified() ? "yes" : "no", q.note()});
  }
  quality.Print(io.out);
  io.out << "\n";
  Table table({"cluster", "runs", "observed steps/s", "predicted steps/s", "iterations",
               "observed time (s)", "predicted time (s)", "error %"});
  table.LeftAlign(0);
  for (const pb::ClusterValidation& c : response.clusters()) {
    table.AddRow({Composition(c.cluster()), absl::StrCat(c.runs()),
                  Fixed(c.observed_steps_per_s(), 3), Fixed(c.predicted_steps_per_s(), 3),
                  Fixed(c.iterations(), 0), Fixed(c.observed_time_s(), 1),
                  Fixed(c.predicted_time_s(), 1), Fixed(c.error_pct(), 2)});
  }
  table.Print(io.out);
  io.out << absl::StrFormat("\nMAPE of the time: %.2f%% over %d cluster(s), largest error %.2f%%\n",
                            response.mape(), response.clusters_size(), response.max_error_pct());
  return kExitOk;
}

// validate-speed --sync: the all-reduce model fitted on the runs of at most --max-gpus GPUs,
// predicting the larger runs spread evenly over their instances, beside Pollux's form.
int ValidateSyncSpeed(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile validate-speed", io); };
  auto runs = args.Required("--runs");
  if (!runs.ok()) return fail(runs.status());
  auto gpu_type = args.Required("--gpu-type");
  if (!gpu_type.ok()) return fail(gpu_type.status());
  int max_gpus = 4;
  if (auto m = args.Get("--max-gpus")) {
    auto n = ParseInt("--max-gpus", *m, 1, predictor::kMaxClusterSize);
    if (!n.ok()) return fail(n.status());
    max_gpus = *n;
  }
  std::vector<profiler::Sample> samples;
  std::uint64_t skipped = 0;
  for (absl::string_view path : absl::StrSplit(*runs, ',', absl::SkipEmpty())) {
    profiler::ImportOptions options;
    options.gpu_type = *gpu_type;
    options.job_id = std::string(path);
    auto imported = profiler::ImportPath(std::string(path), options);
    if (!imported.ok()) {
      return fail(absl::Status(imported.status().code(),
                               absl::StrCat("--runs: ", imported.status().message())));
    }
    skipped += imported->skipped;
    samples.insert(samples.end(), imported->samples.begin(), imported->samples.end());
  }
  auto check =
      profiler::CheckAllReduce(*gpu_type, profiler::AllReduceRunsOf(samples, *gpu_type), max_gpus);
  if (!check.ok()) return fail(check.status());
  auto error = [](double predicted, double observed) {
    return 100 * (predicted - observed) / observed;
  };
  if (io.json) {
    std::vector<std::string> rows;
    for (const profiler::AllReduceCheckRow& r : check->rows) {
      rows.push_back(absl::StrCat(
          "{\"placement\":", JsonString(r.run.Describe()), ",\"instances\":", r.run.Instances(),
          ",\"ranks\":", r.run.Ranks(), ",\"local_batch\":", JsonNumber(r.run.local_batch),
          ",\"observed_s\":", JsonNumber(r.run.step_s),
          ",\"predicted_s\":", JsonNumber(r.predicted_s), ",\"error_pct\":",
          JsonNumber(error(r.predicted_s, r.run.step_s)), ",\"pollux_s\":", JsonNumber(r.pollux_s),
          ",\"pollux_error_pct\":", JsonNumber(error(r.pollux_s, r.run.step_s)), "}"));
    }
    io.out << "{\"gpu_type\":" << JsonString(*gpu_type) << ",\"max_gpus\":" << max_gpus
           << ",\"fitted_runs\":" << check->fitted_runs << ",\"skipped_lines\":" << skipped
           << ",\"mape\":" << JsonNumber(check->mape)
           << ",\"pollux_mape\":" << JsonNumber(check->pollux_mape) << ",\"rows\":["
           << absl::StrJoin(rows, ",") << "]}\n";
    return kExitOk;
  }
  io.out << "Synchronous step time of " << *gpu_type << ": fitted on " << check->fitted_runs
         << " runs of at most " << max_gpus << " GPUs, predicting " << check->rows.size()
         << " runs of more, spread evenly\n\n";
  Table table({"placement", "instances", "ranks", "local batch", "observed (s)", "predicted (s)",
               "error", "Pollux (s)", "Pollux error"});
  table.LeftAlign(0);
  for (const profiler::AllReduceCheckRow& r : check->rows) {
    table.AddRow({r.run.Describe(), absl::StrCat(r.run.Instances()), absl::StrCat(r.run.Ranks()),
                  Fixed(r.run.local_batch, 0), Fixed(r.run.step_s, 4), Fixed(r.predicted_s, 4),
                  absl::StrFormat("%+.1f%%", error(r.predicted_s, r.run.step_s)),
                  Fixed(r.pollux_s, 4),
                  absl::StrFormat("%+.1f%%", error(r.pollux_s, r.run.step_s))});
  }
  table.Print(io.out);
  io.out << "\n";
  Table summary({"model", "MAPE"});
  summary.LeftAlign(0);
  summary.AddRow({"all-reduce (spotdnn)", absl::StrFormat("%.1f%%", check->mape)});
  summary.AddRow({"Pollux's form", absl::StrFormat("%.1f%%", check->pollux_mape)});
  summary.Print(io.out);
  if (skipped > 0) io.out << "\n" << skipped << " lines skipped (malformed)\n";
  return kExitOk;
}

int ValidateSpeedCommand(const Args& args, const Io& io) {
  if (args.Switch("--sync")) return ValidateSyncSpeed(args, io);
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile validate-speed", io); };
  auto runs = args.Required("--runs");
  if (!runs.ok()) return fail(runs.status());
  auto fit_text = args.Required("--fit-workers");
  if (!fit_text.ok()) return fail(fit_text.status());
  std::vector<int> fit_workers;
  for (absl::string_view part : absl::StrSplit(*fit_text, ',')) {
    auto n = ParseInt("--fit-workers", part, 1, 100000);
    if (!n.ok()) return fail(n.status());
    fit_workers.push_back(*n);
  }
  const std::string model_name = args.Get("--model").value_or("shared-ps");
  if (model_name != "shared-ps" && model_name != "paper") {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--model = \"", model_name, "\": expected shared-ps or paper")));
  }
  const profiler::SpeedModel model =
      model_name == "paper" ? profiler::SpeedModel::kPaper : profiler::SpeedModel::kSharedPs;
  const std::vector<std::string> dirs = absl::StrSplit(*runs, ',', absl::SkipEmpty());
  std::vector<profiler::SpeedSeries> series;
  std::uint64_t skipped = 0;
  std::vector<std::string> errors;
  for (const std::string& dir : dirs) {
    profiler::ImportOptions options;
    // Several folders: name each series after its folder too ("k80/res15k80").
    if (dirs.size() > 1) {
      options.job_id = std::filesystem::path(dir).lexically_normal().filename().string();
      if (options.job_id.empty()) {
        options.job_id =
            std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
      }
    }
    auto imported = profiler::ImportPath(dir, options);
    if (!imported.ok()) {
      return fail(absl::Status(imported.status().code(),
                               absl::StrCat("--runs: ", imported.status().message())));
    }
    skipped += imported->skipped;
    errors.insert(errors.end(), imported->errors.begin(), imported->errors.end());
    for (profiler::SpeedSeries& s : profiler::SpeedSeriesFromSamples(imported->samples)) {
      series.push_back(std::move(s));
    }
  }
  auto validation = profiler::ValidateSpeed(series, fit_workers, model);
  if (!validation.ok()) {
    const absl::Status& s = validation.status();
    return fail(absl::Status(s.code(), s.code() == absl::StatusCode::kInvalidArgument
                                           ? absl::StrCat("--", s.message())
                                           : std::string(s.message())));
  }
  if (io.json) {
    std::vector<std::string> series_json;
    for (const profiler::SeriesValidation& v : validation->series) {
      std::vector<std::string> points;
      for (const profiler::SpeedPoint& p : v.points) {
        points.push_back(absl::StrCat(
            "{\"workers\":", p.workers, ",\"observed\":", JsonNumber(p.observed),
            ",\"predicted\":", JsonNumber(p.predicted), ",\"error_pct\":", JsonNumber(p.error_pct),
            ",\"held_out\":", p.held_out ? "true" : "false", "}"));
      }
      const profiler::SpeedCurve& c = v.fit.curve;
      const std::string fit =
          model == profiler::SpeedModel::kPaper
              ? absl::StrCat("{\"model\":\"paper\",\"step_time_s\":", JsonNumber(c.step_time_s),
                             ",\"comm_share\":", JsonNumber(c.comm_share),
                             ",\"bandwidth_ratio\":", JsonNumber(c.bandwidth_ratio),
                             ",\"a1\":", JsonNumber(c.contention.a1),
                             ",\"b1\":", JsonNumber(c.contention.b1))
              : absl::StrCat("{\"model\":\"shared-ps\",\"compute_time_s\":",
                             JsonNumber(v.shared_ps.compute_time_s),
                             ",\"service_time_s\":", JsonNumber(v.shared_ps.service_time_s),
                             ",\"queueing\":", JsonNumber(v.shared_ps.queueing));
      series_json.push_back(absl::StrCat(
          "{\"series\":", JsonString(v.series), ",\"held_out_mape\":", JsonNumber(v.held_out_mape),
          ",\"held_out_points\":", v.held_out_points, ",\"fit\":", fit, ",\"fit_mape\":",
          JsonNumber(v.fit.quality.mape), "},\"points\":[", absl::StrJoin(points, ","), "]}"));
    }
    io.out << "{\"fit_workers\":[" << absl::StrJoin(fit_workers, ",") << "],\"series\":["
           << absl::StrJoin(series_json, ",") << "],\"skipped_lines\":" << skipped
           << ",\"held_out_points\":" << validation->held_out_points
           << ",\"overall_mape\":" << JsonNumber(validation->overall_mape) << "}\n";
    return kExitOk;
  }
  io.out << "Cluster speed (global steps/s): fitted on " << absl::StrJoin(fit_workers, ",")
         << " workers, the other counts held out\n\n";
  Table points({"series", "workers", "role", "observed", "predicted", "error %"});
  points.LeftAlign(2);
  for (const profiler::SeriesValidation& v : validation->series) {
    for (const profiler::SpeedPoint& p : v.points) {
      points.AddRow({v.series, absl::StrCat(p.workers), p.held_out ? "held out" : "fit",
                     Fixed(p.observed, 3), Fixed(p.predicted, 3), Fixed(p.error_pct, 2)});
    }
  }
  points.Print(io.out);
  io.out << "\n";
  if (model == profiler::SpeedModel::kPaper) {
    Table per_series({"series", "T_1 (s)", "comm share c", "B_ps/B_req r", "fit MAPE %",
                      "held-out points", "held-out MAPE %"});
    for (const profiler::SeriesValidation& v : validation->series) {
      per_series.AddRow({v.series, Fixed(v.fit.curve.step_time_s, 4),
                         Fixed(v.fit.curve.comm_share, 3), Fixed(v.fit.curve.bandwidth_ratio, 2),
                         Fixed(v.fit.quality.mape, 2), absl::StrCat(v.held_out_points),
                         Fixed(v.held_out_mape, 2)});
    }
    per_series.Print(io.out);
    io.out << "\nModel: eqs. 2, 6-9 for identical workers, v(N) = N / (T_1 (1 - c + c "
              "B_req/B_wk(N))), P = 1 once B_req > B_ps/N; observed = median of each run's "
              "samples.\n";
  } else {
    Table per_series({"series", "compute z (s)", "server d (s)", "kappa", "fit MAPE %",
                      "held-out points", "held-out MAPE %"});
    for (const profiler::SeriesValidation& v : validation->series) {
      per_series.AddRow({v.series, Fixed(v.shared_ps.compute_time_s, 4),
                         Fixed(v.shared_ps.service_time_s, 4), Fixed(v.shared_ps.queueing, 3),
                         Fixed(v.fit.quality.mape, 2), absl::StrCat(v.held_out_points),
                         Fixed(v.held_out_mape, 2)});
    }
    per_series.Print(io.out);
    io.out << "\nModel: shared parameter server, v(N) = N / T(N), T = z + R, R = d (1 + kappa W / "
              "(1 - W)), W = N d / T; z, d per series, kappa shared; observed = median of each "
              "run's samples.\n";
  }
  if (skipped > 0) {
    io.out << "Skipped " << Plural(skipped, "malformed line", "malformed lines")
           << (errors.empty() ? "" : absl::StrCat("; first: ", errors[0])) << "\n";
  }
  io.out << absl::StrFormat("overall held-out MAPE: %.2f%% over %d points\n",
                            validation->overall_mape, validation->held_out_points);
  return kExitOk;
}

}  // namespace spotdnn::gateway

namespace spotdnn::gateway {
namespace {

// "accuracy>=0.80,0.85,0.88": the metric, its direction and the values.
struct TargetList {
  std::string metric;
  bool higher_is_better = false;
  std::vector<double> values;
};

absl::StatusOr<TargetList> ParseTargetList(absl::string_view text) {
  TargetList out;
  size_t op = text.find(">=");
  out.higher_is_better = op != absl::string_view::npos;
  if (!out.higher_is_better) op = text.find("<=");
  if (op == absl::string_view::npos || op == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--targets = \"", text, "\": expected METRIC>=V[,V...] or METRIC<=V[,V...]"));
  }
  out.metric = std::string(absl::StripAsciiWhitespace(text.substr(0, op)));
  for (absl::string_view v : absl::StrSplit(text.substr(op + 2), ',')) {
    auto n = ParseNumber("--targets", v);
    if (!n.ok()) return n.status();
    out.values.push_back(*n);
  }
  return out;
}

// --by-batch: the steps to each target against the global batch (the critical-batch law,
// profiler/batch_scaling.h), each batch left out in turn.
int ValidateByBatch(const std::string& runs_text, const TargetList& targets, const Io& io) {
  auto fail = [&](const absl::Status& s) {
    return ReportError(s, "profile validate-convergence", io);
  };
  std::vector<profiler::Sample> samples;
  std::uint64_t skipped = 0;
  int index = 0;
  for (absl::string_view entry : absl::StrSplit(runs_text, ',', absl::SkipEmpty())) {
    profiler::ImportOptions import;
    import.job_id = absl::StrCat("runs", index++);
    // A model's folder holds its throughput files beside the curves: they need a GPU type to be
    // read, and nothing here uses it.
    import.gpu_type = "unused";
    auto imported = profiler::ImportPath(std::string(entry), import);
    if (!imported.ok()) {
      return fail(absl::Status(imported.status().code(),
                               absl::StrCat("--runs: ", imported.status().message())));
    }
    skipped += imported->skipped;
    for (profiler::Sample& s : imported->samples) samples.push_back(std::move(s));
  }
  const std::vector<profiler::BatchRun> runs = profiler::BatchRunsOf(samples, targets.metric);
  if (runs.empty()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "--runs: no run logs ", targets.metric, " at two or more steps with its global batch")));
  }
  auto v = profiler::ValidateBatchScaling(runs, targets.values, targets.higher_is_better);
  if (!v.ok()) return fail(v.status());
  const char* op = targets.higher_is_better ? ">=" : "<=";
  if (io.json) {
    std::vector<std::string> checks;
    for (const profiler::BatchCheck& c : v->checks) {
      JsonObject o;
      o.Number("global_batch", c.global_batch).Number("target", c.target);
      if (c.observed) o.Number("observed_steps", *c.observed);
      if (c.predicted) {
        o.Number("predicted_steps", *c.predicted).Number("critical_batch", c.critical_batch);
      }
      if (c.observed && c.predicted) o.Number("error_pct", c.error_pct);
      checks.push_back(o.str());
    }
    std::vector<std::string> per_target;
    for (size_t i = 0; i < targets.values.size(); ++i) {
      per_target.push_back(JsonObject()
                               .Number("target", targets.values[i])
                               .Number("mape_pct", v->target_mape[i])
                               .str());
    }
    io.out << "{\"metric\":" << JsonString(targets.metric) << ",\"direction\":\"" << op
           << "\",\"by\":\"global_batch\",\"runs\":" << runs.size() << ",\"checks\":["
           << absl::StrJoin(checks, ",") << "],\"targets\":[" << absl::StrJoin(per_target, ",")
           << "],\"mape_pct\":" << ShortestNumber(v->mape) << ",\"compared\":" << v->compared
           << ",\"skipped_lines\":" << skipped << "}\n";
    return kExitOk;
  }
  io.out << "Steps to " << targets.metric << " " << op
         << " target against the global batch: " << runs.size()
         << " runs, each global batch left out in turn (S(B) = S_min (1 + B_crit "
         << "/ B), fitted on the others)\n\n";
  Table t({"global batch", "target", "observed", "predicted", "B_crit", "error %"});
  auto steps = [](double s) { return absl::StrFormat("%.0f", s); };
  for (const profiler::BatchCheck& c : v->checks) {
    t.AddRow({absl::StrFormat("%g", c.global_batch), absl::StrFormat("%g", c.target),
              c.observed ? steps(*c.observed) : "never", c.predicted ? steps(*c.predicted) : "-",
              c.predicted ? absl::StrFormat("%.0f", c.critical_batch) : "-",
              c.observed && c.predicted ? absl::StrFormat("%.1f", c.error_pct) : "-"});
  }
  t.Print(io.out);
  io.out << "\nMAPE:";
  for (size_t i = 0; i < targets.values.size(); ++i) {
    io.out << absl::StrFormat(" %g: %.1f%%;", targets.values[i], v->target_mape[i]);
  }
  io.out << absl::StrFormat(" all: %.1f%% over %d checks\n", v->mape, v->compared);
  return kExitOk;
}

}  // namespace

int ValidateConvergenceCommand(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) {
    return ReportError(s, "profile validate-convergence", io);
  };
  auto runs_text = args.Required("--runs");
  if (!runs_text.ok()) return fail(runs_text.status());
  auto targets_text = args.Required("--targets");
  if (!targets_text.ok()) return fail(targets_text.status());
  auto targets = ParseTargetList(*targets_text);
  if (!targets.ok()) return fail(targets.status());
  if (args.Switch("--by-batch")) return ValidateByBatch(*runs_text, *targets, io);
  std::vector<int> fit_sizes;
  if (auto f = args.Get("--fit-sizes")) {
    for (absl::string_view part : absl::StrSplit(*f, ',')) {
      auto n = ParseInt("--fit-sizes", part, 1, predictor::kMaxClusterSize);
      if (!n.ok()) return fail(n.status());
      fit_sizes.push_back(*n);
    }
  }
  profiler::ConvergenceFitOptions options;
  options.metric = targets->metric;
  options.higher_is_better = targets->higher_is_better;
  const std::string form = args.Get("--form").value_or("saturating");
  if (form == "eq3") {
    options.form = predictor::ConvergenceModel::Form::kEq3;
  } else if (form != "saturating") {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--form = \"", form, "\": expected saturating or eq3")));
  }
  if (auto s = args.Get("--schedule"); s && *s != "detect") {
    auto schedule = predictor::ParseLrSchedule(*s);
    if (!schedule.ok())
      return fail(
          absl::InvalidArgumentError(absl::StrCat("--schedule: ", schedule.status().message())));
    options.schedule = *schedule;
  }
  std::vector<profiler::ConvergenceRun> runs;
  std::uint64_t skipped = 0;
  int index = 0;
  for (absl::string_view entry : absl::StrSplit(*runs_text, ',', absl::SkipEmpty())) {
    std::string path(entry);
    profiler::ImportOptions import;
    if (const size_t at = entry.rfind('@'); at != absl::string_view::npos) {
      auto n = ParseInt("--runs", entry.substr(at + 1), 1, predictor::kMaxClusterSize);
      if (!n.ok()) return fail(n.status());
      import.cluster_workers = *n;
      path = std::string(entry.substr(0, at));
    }
    import.job_id = absl::StrCat("runs", index++);
    auto imported = profiler::ImportPath(path, import);
    if (!imported.ok()) {
      return fail(absl::Status(imported.status().code(),
                               absl::StrCat("--runs: ", imported.status().message())));
    }
    skipped += imported->skipped;
    for (profiler::ConvergenceRun& r :
         profiler::ConvergenceRunsOf(imported->samples, targets->metric)) {
      runs.push_back(std::move(r));
    }
  }
  if (runs.empty()) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("--runs: no run logs ", targets->metric, " at two or more steps")));
  }
  auto v = profiler::ValidateConvergence(runs, fit_sizes, targets->values, options);
  if (!v.ok()) {
    const absl::Status& s = v.status();
    return fail(absl::Status(s.code(), s.code() == absl::StatusCode::kInvalidArgument
                                           ? absl::StrCat("--", s.message())
                                           : std::string(s.message())));
  }
  const char* op = targets->higher_is_better ? ">=" : "<=";
  if (io.json) {
    std::vector<std::string> checks;
    for (const profiler::ConvergenceCheck& c : v->checks) {
      JsonObject o;
      o.Number("workers", c.workers).Number("target", c.target).Number("runs", c.runs);
      o.Number("reached", c.reached);
      if (c.observed) o.Number("observed_steps", *c.observed);
      if (c.predicted.reachable) {
        o.Number("iterations_p10", c.predicted.p10)
            .Number("iterations_p50", c.predicted.p50)
            .Number("iterations_p90", c.predicted.p90);
      }
      if (c.observed && c.predicted.reachable) {
        o.Number("error_pct", c.error_pct).Bool("inside_interval", c.inside);
      }
      checks.push_back(o.str());
    }
    std::vector<std::string> per_target;
    for (size_t i = 0; i < targets->values.size(); ++i) {
      per_target.push_back(JsonObject()
                               .Number("target", targets->values[i])
                               .Number("mape_pct", v->target_mape[i])
                               .str());
    }
    std::vector<std::string> notes;
    for (const std::string& n : v->notes) notes.push_back(JsonString(n));
    io.out << "{\"metric\":" << JsonString(targets->metric) << ",\"direction\":\"" << op
           << "\",\"in_sample\":" << (v->in_sample ? "true" : "false") << ",\"fit_sizes\":\""
           << absl::StrJoin(fit_sizes, ",") << "\",\"runs\":" << runs.size() << ",\"checks\":["
           << absl::StrJoin(checks, ",") << "],\"targets\":[" << absl::StrJoin(per_target, ",")
           << "],\"mape_pct\":" << ShortestNumber(v->mape) << ",\"compared\":" << v->compared
           << ",\"inside_interval\":" << v->inside << ",\"skipped_lines\":" << skipped
           << ",\"notes\":[" << absl::StrJoin(notes, ",") << "]}\n";
    return kExitOk;
  }
  io.out << "Steps to " << targets->metric << " " << op << " target: " << runs.size() << " runs, "
         << (fit_sizes.empty()
                 ? std::string("each cluster size left out in turn")
                 : absl::StrCat("fitted on ", absl::StrJoin(fit_sizes, ","), " workers",
                                v->in_sample ? " and checked on the same (in sample)" : ""))
         << "\n\n";
  Table t({"workers", "target", "runs", "observed", "p50", "p10-p90", "error %", "inside"});
  auto steps = [](double s) { return std::isfinite(s) ? absl::StrFormat("%.0f", s) : "never"; };
  for (const profiler::ConvergenceCheck& c : v->checks) {
    t.AddRow({absl::StrCat(c.workers), absl::StrFormat("%g", c.target),
              absl::StrCat(c.reached, "/", c.runs), c.observed ? steps(*c.observed) : "-",
              c.predicted.reachable ? steps(c.predicted.p50) : "never",
              c.predicted.reachable
                  ? absl::StrCat(steps(c.predicted.p10), "-", steps(c.predicted.p90))
                  : "-",
              c.observed && c.predicted.reachable ? absl::StrFormat("%.1f", c.error_pct) : "-",
              c.observed && c.predicted.reachable ? (c.inside ? "yes" : "no") : "-"});
  }
  t.Print(io.out);
  io.out << "\nMAPE:";
  for (size_t i = 0; i < targets->values.size(); ++i) {
    io.out << absl::StrFormat(" %g: %.1f%%;", targets->values[i], v->target_mape[i]);
  }
  io.out << absl::StrFormat(
      " all: %.1f%% over %d checks; observed inside the 80%% interval: %d/%d\n", v->mape,
      v->compared, v->inside, v->compared);
  for (const std::string& n : v->notes) io.out << "Note: " << n << "\n";
  return kExitOk;
}

}  // namespace spotdnn::gateway
