// What a running job's measurements say about its end, as pure functions: where the measured loss
// is heading (the slope of the loss against iterations, extrapolated to the target, at the
// measured pace), whether the deadline can still be met, whether the job is on the plan's line,
// and the smoothing that turns the workers' noisy reports into the job's loss. No clock, no I/O.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_OUTLOOK_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_OUTLOOK_H_

#include <optional>
#include <string>
#include <vector>

namespace spotdnn::job {

// One measurement of a running job: `iterations` done after `elapsed_s` seconds of training,
// and the loss then (0: none reported).
struct LossPoint {
  double elapsed_s = 0;
  double iterations = 0;
  double loss = 0;
};

// The smoothing of the job's loss: an exponential moving average over the gateway's polls of the
// running workers' mean last loss, each poll weighted kLossSmoothingWeight. A worker's last loss
// is one mini-batch's value and jumps from step to step; the average damps that so one lucky
// batch does not end the job.
inline constexpr double kLossSmoothingWeight = 0.5;
// The smoothing, in words, for the summary and status ("loss (...)").
inline constexpr char kLossSmoothingName[] =
    "moving average (weight 0.5 per poll) of the running workers' mean last loss";
// `previous` smoothed with a new poll's mean `mean` (previous 0: the first poll).
double SmoothLoss(double previous, double mean);

// Where the job is heading, from its measurements.
struct Outlook {
  // The measured pace over the recent window (iterations per second; 0: not measured yet).
  double iterations_per_s = 0;
  // The loss's slope against iterations over the recent window (negative: falling); absent
  // without enough loss measurements.
  std::optional<double> loss_slope;
  // Iterations at which the loss reaches the target on that slope (absent: not falling, or not
  // measured); the same in seconds from the job's start at the measured pace.
  std::optional<double> iterations_to_target;
  std::optional<double> seconds_to_target;
  // The current prediction of the iterations the job needs: the plan's until it is exceeded,
  // then the extrapolation (or, without one, the iterations done so far).
  double predicted_iterations = 0;
  // Seconds left to the predicted end at the measured pace (absent: no pace yet).
  std::optional<double> eta_s;
  // The deadline cannot be met under the best current estimate: the job should stop for its loss.
  bool hopeless = false;
  // Why, for the job's failure message (empty unless hopeless).
  std::string why;
};

// What the job is asked and what its plan predicted.
struct OutlookInputs {
  double target_loss = 0;          // 0: no loss target (iterations or epochs)
  double deadline_s = 0;           // 0: none
  double planned_iterations = 0;   // the current plan's
  double iterations_done = 0;      // now
  double elapsed_s = 0;            // now, from the job's start
  std::vector<LossPoint> history;  // oldest first
};

// The outlook. The window is the recent half of the history (at least kMinPoints points). The
// extrapolation is a straight line through the loss against iterations: for a loss that falls
// more slowly as it goes (convex, as training losses do) a straight line reaches the target
// sooner than the loss will, so it is the best case, and a job is called hopeless only when even
// that misses the deadline (or the loss does not fall at all over the window, or the deadline
// has passed). The stop is judged on the slope's optimistic end (two standard errors of the
// least-squares slope steeper), so a few noisy losses cannot end a job whose loss still falls.
// Without a deadline or a loss target nothing is hopeless.
Outlook EstimateOutlook(const OutlookInputs& in);
inline constexpr int kMinPoints = 5;

// Whether a running job is on the plan's line: its iterations at `elapsed_s` at least what the
// plan's straight line (planned_iterations over predicted_time_s) says by then, less 10%.
bool OnTrack(double iterations_done, double elapsed_s, double planned_iterations,
             double predicted_time_s);

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_OUTLOOK_H_
