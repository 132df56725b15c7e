#include "services/gateway/job/job_outlook.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace spotdnn::job {

double SmoothLoss(double previous, double mean) {
  return previous > 0 ? kLossSmoothingWeight * mean + (1 - kLossSmoothingWeight) * previous : mean;
}

Outlook EstimateOutlook(const OutlookInputs& in) {
  Outlook out;
  const size_t n = in.history.size();
  // The recent half of the history, at least kMinPoints points when there are that many.
  const size_t take = std::min(n, std::max<size_t>(kMinPoints, (n + 1) / 2));
  const std::vector<LossPoint> window(in.history.end() - static_cast<std::ptrdiff_t>(take),
                                      in.history.end());
  if (window.size() >= 2 && window.back().elapsed_s > window.front().elapsed_s) {
    out.iterations_per_s = std::max(0.0, (window.back().iterations - window.front().iterations) /
                                             (window.back().elapsed_s - window.front().elapsed_s));
  } else if (in.elapsed_s > 0) {
    out.iterations_per_s = in.iterations_done / in.elapsed_s;
  }

  // Least squares of the loss against iterations over the window's loss measurements.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  double last_loss = 0;
  for (const LossPoint& p : window) {
    if (p.loss <= 0) continue;
    sx += p.iterations;
    sy += p.loss;
    sxx += p.iterations * p.iterations;
    sxy += p.iterations * p.loss;
    ++m;
    last_loss = p.loss;
  }
  const double spread = m * sxx - sx * sx;
  const bool measured = in.target_loss > 0 && m >= kMinPoints && spread > 1e-9 * (1 + sxx * m);
  // The slope's optimistic end (two standard errors steeper): what stopping is judged on, so that
  // noise in a few losses cannot end a job whose loss is still falling.
  double optimistic_slope = 0, optimistic_intercept = 0;
  if (measured) {
    const double slope = (m * sxy - sx * sy) / spread;
    const double intercept = (sy - slope * sx) / m;
    double residuals = 0;
    for (const LossPoint& p : window) {
      if (p.loss <= 0) continue;
      const double r = p.loss - (intercept + slope * p.iterations);
      residuals += r * r;
    }
    const double standard_error =
        m > 2 ? std::sqrt(residuals / (m - 2) / (spread / m)) : 0;  // spread / m = centred Sxx
    optimistic_slope = slope - 2 * standard_error;
    optimistic_intercept = (sy - optimistic_slope * sx) / m;
    out.loss_slope = slope;
    if (last_loss <= in.target_loss) {
      out.iterations_to_target = in.iterations_done;
    } else if (slope < 0) {
      out.iterations_to_target = std::max(in.iterations_done, (in.target_loss - intercept) / slope);
    }
    if (out.iterations_to_target && out.iterations_per_s > 0) {
      out.seconds_to_target =
          in.elapsed_s + (*out.iterations_to_target - in.iterations_done) / out.iterations_per_s;
    }
  }

  // The plan's prediction until it is exceeded; then the extrapolation (0: none).
  if (in.iterations_done <= in.planned_iterations || in.target_loss <= 0) {
    out.predicted_iterations = in.planned_iterations;
  } else {
    out.predicted_iterations = out.iterations_to_target.value_or(0);
  }
  if (out.iterations_per_s > 0 && out.predicted_iterations > 0) {
    out.eta_s =
        std::max(0.0, (out.predicted_iterations - in.iterations_done) / out.iterations_per_s);
  }

  if (in.deadline_s <= 0 || in.target_loss <= 0 || last_loss <= 0) return out;
  if (last_loss <= in.target_loss) return out;
  if (in.elapsed_s > in.deadline_s) {
    out.hopeless = true;
    out.why = absl::StrFormat(
        "the deadline (%.0f s) has passed and the workers' loss is %.4g after %.0f iterations, "
        "above the target %g",
        in.deadline_s, last_loss, in.iterations_done, in.target_loss);
    return out;
  }
  if (!measured) return out;  // too few measurements to say
  // A fall of less than a billionth of the loss over the window is none (rounding in the fit).
  const double span = window.back().iterations - window.front().iterations;
  if (optimistic_slope * std::max(1.0, span) >= -1e-9 * last_loss) {
    out.hopeless = true;
    out.why = absl::StrFormat(
        "the workers' loss is %.4g after %.0f iterations and has not fallen over the last %.0f s "
        "(%d measurements): it cannot reach %g by the %.0f s deadline",
        last_loss, in.iterations_done, window.back().elapsed_s - window.front().elapsed_s, m,
        in.target_loss, in.deadline_s);
    return out;
  }
  // The optimistic line's time to the target, at the measured pace.
  const double optimistic_iterations =
      std::max(in.iterations_done, (in.target_loss - optimistic_intercept) / optimistic_slope);
  const double optimistic_seconds =
      out.iterations_per_s > 0
          ? in.elapsed_s + (optimistic_iterations - in.iterations_done) / out.iterations_per_s
          : in.deadline_s + 1;
  if (out.seconds_to_target && optimistic_seconds > in.deadline_s) {
    out.hopeless = true;
    out.why = absl::StrFormat(
        "the workers' loss is %.4g after %.0f iterations, falling %.3g per iteration over the last "
        "%.0f s; even on that straight line (the best case for a loss that falls ever more "
        "slowly) it reaches %g only at iteration %.0f, in %.0f s at the measured %.3g "
        "iterations/s, "
        "past the %.0f s deadline",
        last_loss, in.iterations_done, -*out.loss_slope,
        window.back().elapsed_s - window.front().elapsed_s, in.target_loss,
        *out.iterations_to_target, *out.seconds_to_target, out.iterations_per_s, in.deadline_s);
  }
  return out;
}

bool OnTrack(double iterations_done, double elapsed_s, double planned_iterations,
             double predicted_time_s) {
  if (planned_iterations <= 0 || predicted_time_s <= 0) return true;  // no line to be behind
  const double due =
      planned_iterations * std::min(1.0, std::max(0.0, elapsed_s) / predicted_time_s);
  if (elapsed_s > predicted_time_s && iterations_done < planned_iterations) return false;
  return iterations_done >= 0.9 * due;
}

}  // namespace spotdnn::job
