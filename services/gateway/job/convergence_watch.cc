#include "services/gateway/job/convergence_watch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "services/common/convert.h"

namespace spotdnn::job {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// JSON has no infinity: an unreachable quantile is written as null and read back as +inf.
nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
double NumOf(const nlohmann::json& doc, const char* key, double otherwise = 0) {
  auto it = doc.find(key);
  if (it == doc.end()) return otherwise;
  if (it->is_null()) return kInf;
  return it->is_number() ? it->get<double>() : otherwise;
}

}  // namespace

absl::StatusOr<predictor::TargetConvergence> PriorOf(const predictor::WorkloadProfile& profile,
                                                     const predictor::Target& target,
                                                     double wa_batch,
                                                     double convergence_coefficient) {
  auto found = predictor::ConvergenceForTarget(profile, target, wa_batch, convergence_coefficient);
  if (!found.ok()) return absl::NotFoundError(found.status().message());
  return found;
}

ConvergenceWatch::ConvergenceWatch(predictor::ConvergenceModel prior,
                                   ConvergenceWatchOptions options, ConvergenceFitter fit,
                                   StepsPredictor predict)
    : prior_(std::move(prior)),
      model_(prior_),
      options_(std::move(options)),
      fit_(std::move(fit)),
      predict_(std::move(predict)) {}

void ConvergenceWatch::Add(double step, double value) {
  if (!std::isfinite(step) || !std::isfinite(value) || step < 0) return;
  if (!points_.empty() && step == points_.back().first) return;
  if (!points_.empty() && step < points_.back().first) Rewind(step);
  points_.emplace_back(step, value);
  if (points_.size() > options_.max_points) {
    // Every other one of the older half: the curve's span and its recent end kept whole.
    const size_t half = points_.size() / 2;
    std::vector<std::pair<double, double>> kept;
    for (size_t i = 0; i < half; i += 2) kept.push_back(points_[i]);
    kept.insert(kept.end(), points_.begin() + half, points_.end());
    const size_t dropped = points_.size() - kept.size();
    points_ = std::move(kept);
    refitted_at_ = refitted_at_ > dropped ? refitted_at_ - dropped : 0;
  }
}

void ConvergenceWatch::Rewind(double step) {
  while (!points_.empty() && points_.back().first >= step) points_.pop_back();
  refitted_at_ = std::min(refitted_at_, points_.size());
}

double ConvergenceWatch::EquivalentStep(double step, int from_workers, double from_r, int workers,
                                        double r) const {
  if ((std::max(1, from_workers) == std::max(1, workers) && from_r == r) ||
      model_.schedule.kind != predictor::LrSchedule::Kind::kConstant) {
    return step;
  }
  const double value = predictor::MeanValueAt(model_, std::max(1, from_workers), from_r, step);
  const double equivalent = predictor::MeanStepAt(model_, std::max(1, workers), r, value);
  return std::isfinite(equivalent) ? equivalent : step;
}

ConvergenceForecast ConvergenceWatch::Forecast(const predictor::ConvergenceModel& model,
                                               double elapsed_s, double step, int workers, double r,
                                               double steps_per_s, double from) const {
  ConvergenceForecast f{.elapsed_s = elapsed_s,
                        .step = step,
                        .points = static_cast<int>(points_.size()),
                        .workers = workers,
                        .r = r,
                        .steps_per_s = steps_per_s,
                        .rmse = last_rmse_,
                        .model = model};
  const predictor::StepQuantiles q = predict_(model, std::max(1, workers), r, options_.target,
                                              from >= 0 ? from : step, options_.draws);
  f.reachable = q.reachable;
  auto total = [&](double left) { return q.reachable && std::isfinite(left) ? step + left : kInf; };
  auto finish = [&](double left) {
    return q.reachable && std::isfinite(left) && steps_per_s > 0 ? elapsed_s + left / steps_per_s
                                                                 : kInf;
  };
  f.iterations_p10 = total(q.p10);
  f.iterations_p50 = total(q.p50);
  f.iterations_p90 = total(q.p90);
  f.finish_p10_s = finish(q.p10);
  f.finish_p50_s = finish(q.p50);
  f.finish_p90_s = finish(q.p90);
  return f;
}

ConvergenceForecast ConvergenceWatch::PriorForecast(int workers, double r,
                                                    double steps_per_s) const {
  ConvergenceForecast f = Forecast(prior_, 0, 0, workers, r, steps_per_s);
  f.prior = true;
  f.points = 0;
  f.rmse = 0;
  return f;
}

std::optional<ConvergenceForecast> ConvergenceWatch::Update(double elapsed_s, double step,
                                                            int workers, double r,
                                                            double steps_per_s, bool force) {
  const size_t n = points_.size();
  const bool due =
      refitted_at_ == 0
          ? n >= static_cast<size_t>(std::max(1, options_.min_points))
          : n >= refitted_at_ + static_cast<size_t>(std::max(1, options_.refit_every_points));
  if (!due && !force) return std::nullopt;
  if (n >= 2) {
    profiler::ConvergenceRun run{
        .job = "live", .workers = std::max(1, workers), .r = r, .points = points_};
    const double steps_per_point =
        std::max(1.0, (points_.back().first - points_.front().first) / (n - 1));
    profiler::ConvergenceFitOptions fit{.metric = prior_.metric,
                                        .higher_is_better = prior_.higher_is_better,
                                        .ceiling = prior_.ceiling,
                                        .form = prior_.form,
                                        .prior = prior_,
                                        .prior_points = options_.prior_samples / steps_per_point};
    if (prior_.schedule.kind != predictor::LrSchedule::Kind::kConstant ||
        prior_.schedule.warmup_steps > 0) {
      fit.schedule = prior_.schedule;  // the job trains through the profile's schedule
    }
    absl::StatusOr<profiler::ConvergenceFit> fitted = fit_({&run, 1}, fit);
    if (fitted.ok()) {
      model_ = fitted->model;
      last_rmse_ = fitted->rmse;
      last_error_.clear();
    } else {
      last_error_ = std::string(fitted.status().message());
    }
    refitted_at_ = n;
  }
  ConvergenceForecast forecast = Forecast(model_, elapsed_s, step, workers, r, steps_per_s);
  late_streak_ = last_error_.empty() && Late(forecast) ? late_streak_ + 1 : 0;
  return forecast;
}

double ConvergenceWatch::HeldFinish(const ConvergenceForecast& forecast) const {
  return options_.confidence > 0 ? forecast.finish_p90_s : forecast.finish_p50_s;
}

bool ConvergenceWatch::Late(const ConvergenceForecast& forecast) const {
  if (options_.deadline_s <= 0 || forecast.prior) return false;
  if (forecast.steps_per_s <= 0) return false;  // no speed measured: no finish to judge
  const double finish = HeldFinish(forecast);
  return !forecast.reachable || !std::isfinite(finish) ||
         finish > options_.deadline_s * (1 + options_.replan_margin);
}

bool ConvergenceWatch::ShouldReplan(const ConvergenceForecast& forecast, double elapsed_s) const {
  if (elapsed_s - last_replan_s_ < options_.min_replan_interval_s) return false;
  // late_refits <= 1: the forecast alone decides (it need not be an Update's).
  return Late(forecast) && (options_.late_refits <= 1 || late_streak_ >= options_.late_refits);
}

std::optional<double> ConvergenceWatch::StepsNeeded(int workers, double r, double step,
                                                    int from_workers, double from_r) const {
  const predictor::StepQuantiles q =
      predict_(model_, std::max(1, workers), r, options_.target,
               EquivalentStep(step, from_workers, from_r, workers, r), options_.draws);
  const double left = options_.confidence > 0 ? q.p90 : q.p50;
  if (!q.reachable || !std::isfinite(left)) return std::nullopt;
  return step + left;
}

namespace {

// The model as the profile stores it (the proto's JSON), so that a forecast read back from the
// log predicts (and draws) what the live one did, with every field the model has.
nlohmann::json ModelJson(const predictor::ConvergenceModel& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Cannot fail for a message this process built (no Any fields).
  if (!google::protobuf::util::MessageToJsonString(services::ToProto(m), &text, options).ok()) {
    return {};
  }
  return nlohmann::json::parse(text, nullptr, false);
}

// A model logged by an earlier version, field by field with the schedule as its text.
predictor::ConvergenceModel LegacyModelOf(const nlohmann::json& m) {
  predictor::ConvergenceModel model;
  model.metric = m.value("metric", std::string("loss"));
  model.higher_is_better = m.value("higher_is_better", false);
  model.ceiling = NumOf(m, "ceiling", 1);
  model.form = m.value("form", std::string()) == "eq3"
                   ? predictor::ConvergenceModel::Form::kEq3
                   : predictor::ConvergenceModel::Form::kSaturating;
  model.floor = NumOf(m, "floor");
  model.floor_exp = NumOf(m, "floor_exp");
  model.amplitude = NumOf(m, "amplitude");
  model.scale = NumOf(m, "scale", 1);
  model.scale_exp = NumOf(m, "scale_exp");
  model.shape = NumOf(m, "shape", 1);
  model.g1 = NumOf(m, "g1");
  model.g3 = NumOf(m, "g3");
  model.g4 = NumOf(m, "g4");
  model.g5 = NumOf(m, "g5");
  if (auto s = predictor::ParseLrSchedule(m.value("schedule", std::string("constant"))); s.ok()) {
    model.schedule = *s;
  }
  model.schedule.detected = m.value("schedule_detected", false);
  if (auto it = m.find("drop_ratios"); it != m.end() && it->is_array()) {
    for (const nlohmann::json& v : *it) {
      if (v.is_number()) model.drop_ratios.push_back(v.get<double>());
    }
  }
  model.rho = NumOf(m, "rho", 1);
  model.drop_time_steps = NumOf(m, "drop_time_steps");
  model.drop_ratio_exp = NumOf(m, "drop_ratio_exp");
  model.noise_sd = NumOf(m, "noise_sd");
  model.noise_exp = NumOf(m, "noise_exp");
  model.noise_sd_after = NumOf(m, "noise_sd_after");
  model.noise_exp_after = NumOf(m, "noise_exp_after");
  model.eval_interval_steps = NumOf(m, "eval_interval_steps");
  model.eval_interval_per_worker_steps = NumOf(m, "eval_interval_per_worker_steps");
  model.runs = static_cast<int>(NumOf(m, "runs"));
  model.points = static_cast<int>(NumOf(m, "points"));
  model.fitted_on = m.value("fitted_on", std::string());
  return model;
}

}  // namespace

std::string ForecastJson(const ConvergenceForecast& f) {
  nlohmann::json doc = {{"prior", f.prior},
                        {"source", f.source},
                        {"elapsed_s", f.elapsed_s},
                        {"step", f.step},
                        {"points", f.points},
                        {"workers", f.workers},
                        {"r", f.r},
                        {"steps_per_s", f.steps_per_s},
                        {"reachable", f.reachable},
                        {"iterations_p10", Num(f.iterations_p10)},
                        {"iterations_p50", Num(f.iterations_p50)},
                        {"iterations_p90", Num(f.iterations_p90)},
                        {"finish_p10_s", Num(f.finish_p10_s)},
                        {"finish_p50_s", Num(f.finish_p50_s)},
                        {"finish_p90_s", Num(f.finish_p90_s)},
                        {"rmse", f.rmse},
                        {"model", ModelJson(f.model)}};
  return doc.dump();
}

absl::StatusOr<ConvergenceForecast> ParseForecastJson(const std::string& json) {
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, false);
  if (!doc.is_object() || !doc.contains("iterations_p50") || !doc.contains("model") ||
      !doc["model"].is_object()) {
    return absl::DataLossError(absl::StrCat("forecast event is not readable: ", json));
  }
  ConvergenceForecast f;
  f.prior = doc.value("prior", false);
  f.source = doc.value("source", std::string(f.prior ? "profile" : "refit"));
  f.elapsed_s = NumOf(doc, "elapsed_s");
  f.step = NumOf(doc, "step");
  f.points = static_cast<int>(NumOf(doc, "points"));
  f.workers = static_cast<int>(NumOf(doc, "workers"));
  f.r = NumOf(doc, "r");
  f.steps_per_s = NumOf(doc, "steps_per_s");
  f.reachable = doc.value("reachable", false);
  f.iterations_p10 = NumOf(doc, "iterations_p10");
  f.iterations_p50 = NumOf(doc, "iterations_p50");
  f.iterations_p90 = NumOf(doc, "iterations_p90");
  f.finish_p10_s = NumOf(doc, "finish_p10_s");
  f.finish_p50_s = NumOf(doc, "finish_p50_s");
  f.finish_p90_s = NumOf(doc, "finish_p90_s");
  f.rmse = NumOf(doc, "rmse");
  const nlohmann::json& model = doc["model"];
  if (model.contains("schedule") && model["schedule"].is_string()) {
    f.model = LegacyModelOf(model);
  } else {
    v1::ConvergenceModel proto;
    if (auto st = google::protobuf::util::JsonStringToMessage(model.dump(), &proto); !st.ok()) {
      return absl::DataLossError(
          absl::StrCat("forecast event's model is not readable: ", st.ToString()));
    }
    f.model = services::ToDomain(proto);
  }
  return f;
}

}  // namespace spotdnn::job
