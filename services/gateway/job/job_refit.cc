// The job's one forecast (convergence_watch.h): the first one from the model the plan was made
// with, then each refit of that model to the job's own measurements, then the forecast for the
// cluster a re-plan or a takeover chose. The progress lines, `jobs`, the summary, the re-plans and
// the stop rule all read it. When it passes the deadline the job re-plans a larger (or faster)
// cluster; only when that cannot help is stopping considered (stop_rules.h, ForecastRule).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "services/common/convert.h"
#include "services/gateway/job/job_run.h"

namespace spotdnn::job {

namespace {

// A forecast is logged when its p50 moved by this share from the last one logged, or after
// kForecastLogEvery: the log shows the prediction over time without a line per refit.
constexpr double kForecastLogMove = 0.02;
constexpr absl::Duration kForecastLogEvery = absl::Seconds(30);
// Rounds of re-planning until the steps the new cluster needs (more workers, more global steps)
// settle within 2%.
constexpr int kReplanRounds = 3;
// The plan's iterations and the first forecast come from one model; a difference beyond this
// (and a step) means the plan was made from another profile than the job's, and is said.
constexpr double kPlanForecastTolerance = 0.01;

ForecastEvent EventOf(const ConvergenceForecast& f, double first_p50, double deadline_s) {
  return ForecastEvent{.prior = f.prior,
                       .source = f.source,
                       .step = f.step,
                       .points = f.points,
                       .workers = f.workers,
                       .reachable = f.reachable,
                       .iterations_p10 = f.iterations_p10,
                       .iterations_p50 = f.iterations_p50,
                       .iterations_p90 = f.iterations_p90,
                       .finish_p10_s = f.finish_p10_s,
                       .finish_p50_s = f.finish_p50_s,
                       .finish_p90_s = f.finish_p90_s,
                       .first_iterations_p50 = first_p50,
                       .deadline_s = deadline_s};
}

// The global steps a second over the last `window_s` of `history` (a re-plan's workers show at
// once, where the outlook's window is half the run); 0 without two points in it.
double RecentSpeed(const std::vector<LossPoint>& history, double window_s) {
  if (history.size() < 2) return 0;
  const LossPoint& last = history.back();
  auto first = std::lower_bound(history.begin(), history.end(), last.elapsed_s - window_s,
                                [](const LossPoint& p, double t) { return p.elapsed_s < t; });
  if (first == history.end() || last.elapsed_s - first->elapsed_s <= 0) return 0;
  return (last.iterations - first->iterations) / (last.elapsed_s - first->elapsed_s);
}

int Sum(const std::map<std::string, int>& counts) {
  int n = 0;
  for (const auto& [type, c] : counts) n += c;
  return n;
}

std::string Steps(double steps) {
  return std::isfinite(steps) ? absl::StrFormat("%.0f", steps) : std::string("never");
}

}  // namespace

double JobRun::ForecastDeadline() const {
  return spec_.deadline_s > 0 ? std::max(1e-3, spec_.deadline_s - job_.profiling_s) : 0;
}

double JobRun::ElapsedS() { return job_.started_ms > 0 ? (NowMs() - job_.started_ms) / 1000.0 : 0; }

double JobRun::MeasuredSpeed() {
  // The speed over the last 10 s (5 progress periods by default), else the outlook's.
  double speed = RecentSpeed(history_, absl::ToDoubleSeconds(5 * options_.progress_every));
  if (speed <= 0) speed = CurrentOutlook().iterations_per_s;
  return speed;
}

absl::Status JobRun::StartWatch() {
  // A loss target only, for now (the workers report a loss; other metrics are not polled).
  if (spec_.target_loss <= 0) return absl::OkStatus();
  const pb::Prediction& planned = plan_.prediction();
  auto prior = PriorOf(services::ToDomain(workload_), predictor::Target::Loss(spec_.target_loss),
                       planned.wa_batch(), planned.convergence_coefficient());
  if (!prior.ok()) return absl::OkStatus();  // nothing to forecast from: the outlook alone
  r_weight_ = prior->r_weight;
  cluster_r_ = planned.convergence_coefficient();
  const double deadline_s = ForecastDeadline();
  // Measurements come a poll at a time (every 250 ms while the iterations grow): the first refit
  // after 10 of them, then one each 10 more; the re-plans at least a tenth of the deadline apart
  // (10 s to 5 min), time for the workers a re-plan adds to show in the measured speed.
  watch_ = std::make_unique<ConvergenceWatch>(
      std::move(prior->model),
      ConvergenceWatchOptions{.metric = "loss",
                              .target = spec_.target_loss,
                              .deadline_s = deadline_s,
                              .confidence = spec_.confidence,
                              .min_points = 10,
                              .refit_every_points = 10,
                              .min_replan_interval_s = std::clamp(deadline_s / 10, 10.0, 300.0)});
  for (const LossPoint& p : history_) {
    if (p.loss > 0) watch_->Add(p.iterations, p.loss);
  }
  const double planned_speed =
      planned.time_s() > 0 ? planned.normalized_iterations() / planned.time_s() : 0;
  first_forecast_ =
      watch_->PriorForecast(planned.worker_count(), r_weight_ * cluster_r_, planned_speed);
  // A resumed job: its first forecast and the current one are in the log.
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  bool first = true;
  for (const JobEventRecord& e : *events) {
    if (e.kind == "refit-replan") ++refit_replans_;
    if (e.kind != kForecastEvent) continue;
    auto logged = ParseForecastJson(e.detail);
    if (!logged.ok()) return logged.status();
    if (first) first_forecast_ = *logged;
    first = false;
    logged_forecast_ = *logged;
    forecast_ = *logged;
  }
  if (!first) return absl::OkStatus();
  logged_forecast_ = first_forecast_;
  forecast_ = first_forecast_;
  if (auto s = Log(kForecastEvent, ForecastJson(first_forecast_)); !s.ok()) return s;
  Emit(EventOf(first_forecast_, first_forecast_.iterations_p50, deadline_s));
  const double planned_iterations = planned.normalized_iterations();
  if (planned_iterations > 0 && !(std::abs(first_forecast_.iterations_p50 - planned_iterations) <=
                                  1 + kPlanForecastTolerance * planned_iterations)) {
    return Warn(absl::StrFormat(
        "the plan's %.0f iterations and the profile's forecast of %s global steps differ: the "
        "plan was not made from this job's profile (%s); the forecast is what the job follows",
        planned_iterations, Steps(first_forecast_.iterations_p50),
        first_forecast_.model.fitted_on.empty() ? "its model" : first_forecast_.model.fitted_on));
  }
  return absl::OkStatus();
}

absl::Status JobRun::Warn(const std::string& message) {
  if (auto s = Log("warning", message); !s.ok()) return s;
  Emit(WarningEvent{.message = message});
  return absl::OkStatus();
}

absl::Status JobRun::AdoptForecast(const ConvergenceForecast& forecast) {
  forecast_ = forecast;
  // The job's current prediction is the forecast: its iterations (the held quantile) and finish
  // go on the job's record, which `jobs`, `status` and the summary show.
  const double held = spec_.confidence > 0 ? forecast.iterations_p90 : forecast.iterations_p50;
  const double finish = spec_.confidence > 0 ? forecast.finish_p90_s : forecast.finish_p50_s;
  if (forecast.reachable && std::isfinite(held) && held > 0) {
    job_.target_iterations = held;
    if (std::isfinite(finish) && finish > 0) {
      const double elapsed_s = ElapsedS();
      job_.predicted_time_s = std::max(finish, elapsed_s);
      job_.predicted_cost_usd =
          CostSoFar() + HourlyCost() * std::max(0.0, finish - elapsed_s) / 3600;
    }
    if (auto s = Save(); !s.ok()) return s;
  }
  const bool moved =
      !logged_forecast_.has_value() || logged_forecast_->reachable != forecast.reachable ||
      logged_forecast_->source != forecast.source ||
      std::abs(forecast.iterations_p50 - logged_forecast_->iterations_p50) >
          kForecastLogMove * std::max(1.0, logged_forecast_->iterations_p50) ||
      forecast.elapsed_s - logged_forecast_->elapsed_s >= absl::ToDoubleSeconds(kForecastLogEvery);
  if (!moved) return absl::OkStatus();
  logged_forecast_ = forecast;
  if (auto s = Log(kForecastEvent, ForecastJson(forecast)); !s.ok()) return s;
  Emit(EventOf(forecast, first_forecast_.iterations_p50, ForecastDeadline()));
  return absl::OkStatus();
}

double JobRun::HourlyCost() const {
  double rate = 0;
  for (const auto& [id, i] : instances_) {
    if (i.state != InstanceStatus::kEnded) rate += i.price_per_hour;
  }
  return rate;
}

absl::Status JobRun::WatchConvergence() {
  if (watch_ == nullptr || job_.started_ms == 0 || job_.state != JobState::kRunning) {
    return absl::OkStatus();
  }
  // A parameter-server restore: the workers are stopped or relaunched, and the loss they report
  // (or the one kept from before) is not the curve's. Nothing is measured, refitted or re-planned
  // until the restored workers train again.
  if (restoring_) return absl::OkStatus();
  if (job_.loss > 0) watch_->Add(job_.iterations_done, job_.loss);
  if (clock_.Now() < next_refit_) return absl::OkStatus();
  const double speed = MeasuredSpeed();
  if (speed <= 0) return absl::OkStatus();  // no speed measured yet
  const double elapsed_s = ElapsedS();
  std::optional<ConvergenceForecast> forecast = watch_->Update(
      elapsed_s, job_.iterations_done, Sum(LiveWorkers()), r_weight_ * cluster_r_, speed);
  if (!forecast.has_value()) return absl::OkStatus();
  // At most one refit a progress period: each runs the fit and a Monte Carlo.
  next_refit_ = clock_.Now() + options_.progress_every;
  // A failed fit (too few points yet, a curve it cannot follow) predicts with the last model: at
  // first the profile's, which the plan was made from. Nothing new to adopt or re-plan for.
  if (!watch_->last_error().empty()) return absl::OkStatus();
  forecast->source = "refit";
  if (auto s = AdoptForecast(*forecast); !s.ok()) return s;
  // On time again: a later lateness needs a re-plan of its own before a stop is considered.
  if (!watch_->Late(*forecast)) late_replan_.reset();
  if (!watch_->ShouldReplan(*forecast, elapsed_s)) return absl::OkStatus();
  return RefitReplan(*forecast);
}

absl::StatusOr<JobRun::ForecastReplan> JobRun::ReplanFromForecast(
    const std::map<std::string, int>& survivors, const pb::Cluster& before,
    const std::string& what) {
  ForecastReplan out;
  const double deadline_s = ForecastDeadline();
  // Where the job stands: its global steps on the cluster that made them (its R: the plan's or
  // the last re-plan's).
  const int from_workers = std::max(1, Sum(LiveWorkers()));
  const double from_r = r_weight_ * cluster_r_;
  out.from_workers = from_workers;
  out.from_r = from_r;
  std::optional<double> needed =
      watch_->StepsNeeded(Sum(survivors), from_r, job_.iterations_done, from_workers, from_r);
  if (!needed.has_value()) {
    out.unreachable = absl::StrFormat(
        "the current forecast (%s, %d points) does not reach the target loss %g on %d workers, "
        "and under the model more workers do not bring it lower",
        forecast_.has_value() ? forecast_->source : std::string("profile"), watch_->points(),
        spec_.target_loss, Sum(survivors));
    return out;
  }
  // The rest of the job as an iterations target: the steps the current forecast says the new
  // cluster needs.
  pb::Slo slo = SloOf(spec_);
  slo.set_target_loss(0);
  if (deadline_s > 0) slo.set_deadline_s(deadline_s);
  absl::StatusOr<pb::ReplanResponse> replan;
  for (int round = 0; round < kReplanRounds; ++round) {
    *needed = std::ceil(*needed);  // the SLO's iterations are whole
    if (*needed <= job_.iterations_done) *needed = job_.iterations_done + 1;
    slo.set_target_iterations(*needed);
    replan = RequestReplan(survivors, before, job_.iterations_done, {}, what, &slo);
    if (!replan.ok() || !replan->plan().feasible()) break;
    const pb::Prediction& p = replan->plan().prediction();
    std::optional<double> more = watch_->StepsNeeded(WorkersAfter(replan->plan(), survivors),
                                                     r_weight_ * p.convergence_coefficient(),
                                                     job_.iterations_done, from_workers, from_r);
    if (!more.has_value() || *more <= *needed * 1.02) break;
    needed = more;
  }
  if (!replan.ok()) return replan.status();
  out.needed = *needed;
  if (!replan->plan().feasible() && std::isfinite(replan->best_finish_time_s()) &&
      replan->best_finish_time_s() > 0) {
    // No cluster meets the deadline: the one that finishes earliest (the cheapest that meets its
    // finish), so the job misses by as little as it can.
    const std::string reason = replan->plan().reason();
    pb::Slo earliest = slo;
    earliest.set_deadline_s(replan->best_finish_time_s() * 1.01);
    auto again = RequestReplan(survivors, before, job_.iterations_done, {}, what, &earliest);
    if (again.ok() && again->plan().feasible()) {
      out.fastest = absl::StrFormat(
          "; no cluster meets the deadline (%s): the one finishing earliest, about %.0f s after "
          "the start",
          reason, replan->best_finish_time_s());
      replan = std::move(again);
    }
  }
  out.replan = *std::move(replan);
  return out;
}

int WorkersAfter(const pb::Plan& plan, const std::map<std::string, int>& survivors) {
  if (plan.prediction().worker_count() > 0) return plan.prediction().worker_count();
  int n = Sum(survivors);
  for (const pb::InstanceCount& c : plan.to_launch().instances()) n += c.count();
  return n;
}

ConvergenceForecast JobRun::ForecastForPlan(const pb::Plan& plan, int workers, double needed,
                                            int from_workers, double from_r) {
  const pb::Prediction& p = plan.prediction();
  const double rest = needed - job_.iterations_done;
  const double speed = plan.time_s() > 0 && rest > 0 ? rest / plan.time_s() : MeasuredSpeed();
  ConvergenceForecast f =
      watch_->Current(ElapsedS(), job_.iterations_done, workers,
                      r_weight_ * p.convergence_coefficient(), speed, from_workers, from_r);
  f.source = "re-plan";
  return f;
}

absl::Status JobRun::RefitReplan(const ConvergenceForecast& forecast) {
  const double elapsed_s = ElapsedS();
  watch_->MarkReplanned(elapsed_s);
  const double deadline_s = ForecastDeadline();
  const std::string why = absl::StrFormat(
      "the convergence refit (%d points) predicts the finish at %s, past the deadline %.0f s",
      forecast.points,
      std::isfinite(watch_->HeldFinish(forecast))
          ? absl::StrFormat("%.0f s (%.0f global steps)", watch_->HeldFinish(forecast),
                            watch_->options().confidence > 0 ? forecast.iterations_p90
                                                             : forecast.iterations_p50)
          : std::string("never"),
      deadline_s);
  // What was tried, for the stop rule: it stops a late job only after a re-plan that could not
  // help, and says what that was.
  auto could_not_help = [&](const std::string& outcome) -> absl::Status {
    late_replan_ = LateReplan{.at_s = elapsed_s, .helped = false, .outcome = outcome};
    const std::string detail = absl::StrCat(why, "; ", outcome);
    if (auto s = Log("refit-replan", detail); !s.ok()) return s;
    Emit(ReplannedEvent{.feasible = false, .detail = detail, .refit = true});
    return absl::OkStatus();
  };
  const std::map<std::string, int> survivors = LiveWorkers();
  auto planned = ReplanFromForecast(survivors, ClusterOf(survivors),
                                    "re-planning after the convergence refit");
  if (!planned.ok()) {
    return could_not_help(absl::StrCat("the re-plan failed: ", planned.status().message()));
  }
  if (!planned->unreachable.empty()) {
    return could_not_help(
        absl::StrCat(planned->unreachable, ", so there is no number of steps to re-plan for"));
  }
  const pb::ReplanResponse& replan = planned->replan;
  if (!replan.plan().feasible()) {
    return could_not_help(absl::StrCat("no larger cluster within the quotas meets it (",
                                       replan.plan().reason(), "): the job runs on as it is"));
  }
  const pb::Plan& plan = replan.plan();
  const std::vector<TypeCount> to_launch = CountsOf(plan.to_launch());
  if (to_launch.empty()) {
    return could_not_help(
        "the cheapest cluster that finishes earliest is the one running: nothing to add");
  }
  const int first_index = job_.next_worker_index;
  const std::string token = absl::StrCat(job_.id, "-refit-", ++refit_replans_, "-");
  for (const TypeCount& c : to_launch) job_.next_worker_index += c.count;
  plan_ = plan;
  cluster_r_ = plan.prediction().convergence_coefficient();
  late_replan_ = LateReplan{.at_s = elapsed_s, .helped = true};
  // Written before launching (a resumed gateway does not launch it again: the instances that
  // started are on record, those that did not are not retried).
  if (auto s = Save(); !s.ok()) return s;
  std::vector<std::string> launch;
  for (const TypeCount& c : to_launch)
    launch.push_back(absl::StrCat(c.instance_type, "=", c.count));
  const nlohmann::json record = {{"why", why + planned->fastest},
                                 {"iterations", planned->needed},
                                 {"first_index", first_index},
                                 {"token", token},
                                 {"launch", absl::StrJoin(launch, ",")},
                                 {"replan", nlohmann::json::parse(ToStoredJson(replan))}};
  if (auto s = Log("refit-replan", record.dump()); !s.ok()) return s;
  Emit(ReplannedEvent{.feasible = true,
                      .to_launch = to_launch,
                      .more_iterations = planned->needed - job_.iterations_done,
                      .predicted_time_s = plan.time_s(),
                      .predicted_cost_usd = plan.cost_usd(),
                      .remaining_time_s = replan.remaining_time_s(),
                      .detail = why + planned->fastest,
                      .refit = true});
  // The forecast for the new cluster: the current model, its workers.
  if (auto s = AdoptForecast(ForecastForPlan(plan, WorkersAfter(plan, survivors), planned->needed,
                                             planned->from_workers, planned->from_r));
      !s.ok()) {
    return s;
  }
  auto launched = Launch(to_launch, first_index, token, plan.prediction(), LaunchReason::kRefit,
                         /*with_servers=*/false);
  if (!launched.ok())
    return Warn(absl::StrCat("launching the refit's workers: ", launched.status().message()));
  std::vector<std::string> ids;
  for (const launcher::Instance& i : launched->instances) ids.push_back(i.id);
  if (auto s = Log("refit-launched", absl::StrJoin(ids, ",")); !s.ok()) return s;
  if (!launched->error.ok()) {
    return Warn(absl::StrCat("launching the refit's workers: ", launched->error.message()));
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::job
