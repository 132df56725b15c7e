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
#include "predictor/types.h"
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

int ValidateSpeedCommand(const Args& args, const Io& io) {
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
