// The live convergence refit of a running job (convergence_watch.h): its forecasts in the job
// log, and the re-plan of a larger cluster when the refitted finish passes the deadline.
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

ForecastEvent EventOf(const ConvergenceForecast& f, double first_p50, double deadline_s) {
  return ForecastEvent{.prior = f.prior,
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

}  // namespace

absl::Status JobRun::StartWatch() {
  // A loss target only, for now (a target in another metric: once the spec carries it).
  if (spec_.target_loss <= 0) return absl::OkStatus();
  const pb::Prediction& planned = plan_.prediction();
  auto prior = PriorOf(services::ToDomain(workload_), "loss", planned.wa_batch());
  if (!prior.ok()) return absl::OkStatus();  // nothing to refit from: the outlook alone
  const double deadline_s =
      spec_.deadline_s > 0 ? std::max(1e-3, spec_.deadline_s - job_.profiling_s) : 0;
  // Measurements come a poll at a time (every 250 ms while the iterations grow): the first refit
  // after 10 of them, then one each 10 more; the re-plans at least a tenth of the deadline apart
  // (10 s to 5 min), time for the workers a re-plan adds to show in the measured speed.
  watch_ = std::make_unique<ConvergenceWatch>(
      *std::move(prior),
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
  first_forecast_ = watch_->PriorForecast(planned.worker_count(), planned.convergence_coefficient(),
                                          planned_speed);
  // A resumed job: its first forecast and the last one are in the log.
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
  }
  if (!first) return absl::OkStatus();
  logged_forecast_ = first_forecast_;
  if (auto s = Log(kForecastEvent, ForecastJson(first_forecast_)); !s.ok()) return s;
  Emit(EventOf(first_forecast_, first_forecast_.iterations_p50, deadline_s));
  return absl::OkStatus();
}

absl::Status JobRun::WatchConvergence() {
  if (watch_ == nullptr || job_.started_ms == 0 || job_.state != JobState::kRunning) {
    return absl::OkStatus();
  }
  if (job_.loss > 0) watch_->Add(job_.iterations_done, job_.loss);
  if (clock_.Now() < next_refit_) return absl::OkStatus();
  // The speed over the last 10 s (5 progress periods by default), else the outlook's.
  double speed = RecentSpeed(history_, absl::ToDoubleSeconds(5 * options_.progress_every));
  if (speed <= 0) speed = CurrentOutlook().iterations_per_s;
  if (speed <= 0) return absl::OkStatus();  // no speed measured yet
  const double elapsed_s = (NowMs() - job_.started_ms) / 1000.0;
  std::optional<ConvergenceForecast> forecast =
      watch_->Update(elapsed_s, job_.iterations_done, Sum(LiveWorkers()),
                     plan_.prediction().convergence_coefficient(), speed);
  if (!forecast.has_value()) return absl::OkStatus();
  // At most one refit a progress period: each runs the fit and a Monte Carlo.
  next_refit_ = clock_.Now() + options_.progress_every;
  // A failed fit (too few points yet, a curve it cannot follow) predicts with the last model: at
  // first the profile's, which the plan was made from. Nothing new to log or re-plan for.
  if (!watch_->last_error().empty()) return absl::OkStatus();
  const bool moved =
      !logged_forecast_.has_value() || logged_forecast_->reachable != forecast->reachable ||
      std::abs(forecast->iterations_p50 - logged_forecast_->iterations_p50) >
          kForecastLogMove * std::max(1.0, logged_forecast_->iterations_p50) ||
      forecast->elapsed_s - logged_forecast_->elapsed_s >= absl::ToDoubleSeconds(kForecastLogEvery);
  if (moved) {
    logged_forecast_ = *forecast;
    if (auto s = Log(kForecastEvent, ForecastJson(*forecast)); !s.ok()) return s;
    Emit(EventOf(*forecast, first_forecast_.iterations_p50, watch_->options().deadline_s));
  }
  if (!watch_->ShouldReplan(*forecast, elapsed_s)) return absl::OkStatus();
  return RefitReplan(*forecast);
}

absl::Status JobRun::RefitReplan(const ConvergenceForecast& forecast) {
  const double elapsed_s = (NowMs() - job_.started_ms) / 1000.0;
  watch_->MarkReplanned(elapsed_s);
  const double deadline_s = watch_->options().deadline_s;
  const std::string why = absl::StrFormat(
      "the convergence refit (%d points) predicts the finish at %s, past the deadline %.0f s",
      forecast.points,
      std::isfinite(watch_->HeldFinish(forecast))
          ? absl::StrFormat("%.0f s (%.0f global steps)", watch_->HeldFinish(forecast),
                            watch_->options().confidence > 0 ? forecast.iterations_p90
                                                             : forecast.iterations_p50)
          : std::string("never"),
      deadline_s);
  auto warn = [&](const std::string& message) -> absl::Status {
    if (auto s = Log("warning", message); !s.ok()) return s;
    Emit(WarningEvent{.message = message});
    return absl::OkStatus();
  };
  const std::map<std::string, int> survivors = LiveWorkers();
  double r = plan_.prediction().convergence_coefficient();
  std::optional<double> needed = watch_->StepsNeeded(Sum(survivors), r, job_.iterations_done);
  if (!needed.has_value()) {
    return warn(absl::StrCat(why,
                             "; the refitted loss does not reach the target on this "
                             "cluster, so there is no number of steps to re-plan for"));
  }
  // The rest of the job as an iterations target: the steps the refit says the new cluster needs.
  pb::Slo slo = SloOf(spec_);
  slo.set_target_loss(0);
  if (deadline_s > 0) slo.set_deadline_s(deadline_s);
  absl::StatusOr<pb::ReplanResponse> replan;
  for (int round = 0; round < kReplanRounds; ++round) {
    *needed = std::ceil(*needed);  // the SLO's iterations are whole
    slo.set_target_iterations(*needed);
    replan = RequestReplan(survivors, ClusterOf(survivors), job_.iterations_done, {},
                           "re-planning after the convergence refit", &slo);
    if (!replan.ok() || !replan->plan().feasible()) break;
    const pb::Prediction& p = replan->plan().prediction();
    std::optional<double> more =
        watch_->StepsNeeded(p.worker_count(), p.convergence_coefficient(), job_.iterations_done);
    if (!more.has_value() || *more <= *needed * 1.02) break;
    needed = more;
  }
  if (!replan.ok()) return warn(absl::StrCat(why, "; ", replan.status().message()));
  std::string fastest;  // set when no cluster meets the deadline and the fastest one is taken
  if (!replan->plan().feasible() && std::isfinite(replan->best_finish_time_s()) &&
      replan->best_finish_time_s() > 0) {
    // No cluster meets the deadline: the one that finishes earliest (the cheapest that meets its
    // finish), so the job misses by as little as it can.
    const std::string reason = replan->plan().reason();
    pb::Slo earliest = slo;
    earliest.set_deadline_s(replan->best_finish_time_s() * 1.01);
    auto again = RequestReplan(survivors, ClusterOf(survivors), job_.iterations_done, {},
                               "re-planning after the convergence refit", &earliest);
    if (again.ok() && again->plan().feasible()) {
      fastest = absl::StrFormat(
          "; no cluster meets the deadline (%s): the one finishing "
          "earliest, about %.0f s after the start",
          reason, replan->best_finish_time_s());
      replan = std::move(again);
    }
  }
  if (!replan->plan().feasible()) {
    const std::string detail = absl::StrCat(why, "; no larger cluster meets it (",
                                            replan->plan().reason(), "): the job runs on as it is");
    if (auto s = Log("refit-replan", detail); !s.ok()) return s;
    Emit(ReplannedEvent{.feasible = false, .detail = detail, .refit = true});
    return absl::OkStatus();
  }
  const pb::Plan& plan = replan->plan();
  const std::vector<TypeCount> to_launch = CountsOf(plan.to_launch());
  const int first_index = job_.next_worker_index;
  const std::string token = absl::StrCat(job_.id, "-refit-", ++refit_replans_, "-");
  for (const TypeCount& c : to_launch) job_.next_worker_index += c.count;
  plan_ = plan;
  job_.target_iterations = *needed;
  job_.predicted_time_s = elapsed_s + plan.time_s();
  job_.predicted_cost_usd = CostSoFar() + plan.cost_usd();
  // Written before launching (a resumed gateway does not launch it again: the instances that
  // started are on record, those that did not are not retried).
  if (auto s = Save(); !s.ok()) return s;
  std::vector<std::string> launch;
  for (const TypeCount& c : to_launch)
    launch.push_back(absl::StrCat(c.instance_type, "=", c.count));
  const nlohmann::json record = {{"why", why + fastest},
                                 {"iterations", *needed},
                                 {"first_index", first_index},
                                 {"token", token},
                                 {"launch", absl::StrJoin(launch, ",")},
                                 {"replan", nlohmann::json::parse(ToStoredJson(*replan))}};
  if (auto s = Log("refit-replan", record.dump()); !s.ok()) return s;
  Emit(ReplannedEvent{.feasible = true,
                      .to_launch = to_launch,
                      .more_iterations = *needed - job_.iterations_done,
                      .predicted_time_s = plan.time_s(),
                      .predicted_cost_usd = plan.cost_usd(),
                      .remaining_time_s = replan->remaining_time_s(),
                      .detail = why + fastest,
                      .refit = true});
  if (to_launch.empty()) return absl::OkStatus();
  auto launched = Launch(to_launch, first_index, token, plan.prediction(), LaunchReason::kRefit,
                         /*with_servers=*/false);
  if (!launched.ok())
    return warn(absl::StrCat("launching the refit's workers: ", launched.status().message()));
  std::vector<std::string> ids;
  for (const launcher::Instance& i : launched->instances) ids.push_back(i.id);
  if (auto s = Log("refit-launched", absl::StrJoin(ids, ",")); !s.ok()) return s;
  if (!launched->error.ok()) {
    return warn(absl::StrCat("launching the refit's workers: ", launched->error.message()));
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::job
