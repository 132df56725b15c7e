#include "services/gateway/job/stop_rules.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/gateway/job/job_summary.h"

namespace spotdnn::job {

StopDecision TargetRule::Check(const JobRecord& job, const JobSpec& spec) const {
  return TargetReached(job, spec) ? StopDecision::Finish() : StopDecision::GoOn();
}

StopDecision OutlookRule::Check(const Outlook& outlook) const {
  if (!outlook.hopeless) return StopDecision::GoOn();
  return StopDecision::GiveUp(absl::StrCat(outlook.why,
                                           " (refit the profile with `spotdnn profile fit`, or "
                                           "ask for a reachable loss or a later deadline)"));
}

StopDecision ForecastRule::Check(const ForecastStopInputs& in) const {
  if (in.deadline_s <= 0 || in.forecast == nullptr || in.outlook == nullptr) {
    return StopDecision::GoOn();
  }
  if (in.restoring) return StopDecision::GoOn();
  const ConvergenceForecast& f = *in.forecast;
  auto finish = [](double s) {
    return std::isfinite(s) ? absl::StrFormat("%.0f s", s) : std::string("never");
  };
  auto steps = [](double s) {
    return std::isfinite(s) ? absl::StrFormat("%.0f", s) : std::string("never");
  };
  const std::string forecast_says = absl::StrFormat(
      "the job's forecast (%s at step %.0f, %d workers) puts the target at step %s (p10 %s), "
      "finishing at %s (best case %s)",
      f.source, f.step, f.workers, steps(f.iterations_p50), steps(f.iterations_p10),
      finish(f.finish_p50_s), finish(f.finish_p10_s));
  if (in.elapsed_s > in.deadline_s && in.outlook->hopeless) {
    return StopDecision::GiveUp(absl::StrCat(in.outlook->why, "; ", forecast_says));
  }
  const bool late =
      !f.reachable || !std::isfinite(f.finish_p10_s) || f.finish_p10_s > in.deadline_s;
  if (!late || f.prior) return StopDecision::GoOn();
  // Stopping is the last resort: a re-plan first, after the forecast turned late.
  if (!in.replanned || in.replan_helped) return StopDecision::GoOn();
  if (!in.outlook->hopeless) return StopDecision::GoOn();
  return StopDecision::GiveUp(absl::StrFormat(
      "%s, past the %.0f s deadline; the re-plan at %.0f s could not help (%s); and %s (refit "
      "the profile with `spotdnn profile fit`, raise the quotas, or ask for a reachable loss or a "
      "later deadline)",
      forecast_says, in.deadline_s, in.replan_at_s, in.replan_outcome, in.outlook->why));
}

StallRule::StallRule(absl::Duration timeout, double iterations, absl::Time now, std::string where)
    : timeout_(timeout),
      last_iterations_(iterations),
      last_advance_(now),
      where_(std::move(where)) {}

StopDecision StallRule::Check(double iterations_done, double target_iterations, absl::Time now) {
  if (iterations_done > last_iterations_) {
    last_iterations_ = iterations_done;
    last_advance_ = now;
    return StopDecision::GoOn();
  }
  if (!(timeout_ > absl::ZeroDuration()) || now - last_advance_ <= timeout_) {
    return StopDecision::GoOn();
  }
  return StopDecision::GiveUp(absl::StrCat(
      "no worker reported a new iteration for ", absl::FormatDuration(timeout_), " (",
      absl::StrFormat("%.0f", iterations_done), " of ", absl::StrFormat("%.0f", target_iterations),
      " done): do the workers report their steps to the profiler ($SPOTDNN_PROFILER)?", where_));
}

WorkersLeftRule::WorkersLeftRule(std::string worker_command, std::string where)
    : worker_command_(std::move(worker_command)), where_(std::move(where)) {}

StopDecision WorkersLeftRule::Check(size_t live_workers, bool takeover_pending,
                                    const WorkerExit* last_exit) const {
  if (live_workers > 0 || takeover_pending) return StopDecision::GoOn();
  std::string why = absl::StrCat(
      "no worker is left running and no takeover is pending (worker command: ", worker_command_,
      ")", where_);
  if (last_exit != nullptr && last_exit->status != 0) {
    absl::StrAppend(&why, "\n", FailedCommandText(*last_exit));
  }
  return StopDecision::GiveUp(std::move(why));
}

std::string FailedCommandText(const WorkerExit& exit) {
  std::string text = absl::StrCat("The command on ", exit.instance, " ended with ", exit.how);
  if (!exit.last_lines.empty()) {
    absl::StrAppend(&text, "; its last lines:\n  ", absl::StrJoin(exit.last_lines, "\n  "));
  }
  return text;
}

}  // namespace spotdnn::job
