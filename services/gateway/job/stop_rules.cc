#include "services/gateway/job/stop_rules.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

StopDecision WorkersLeftRule::Check(size_t live_workers, bool takeover_pending) const {
  if (live_workers > 0 || takeover_pending) return StopDecision::GoOn();
  return StopDecision::GiveUp(absl::StrCat(
      "no worker is left running and no takeover is pending (worker command: ", worker_command_,
      ")", where_));
}

}  // namespace spotdnn::job
