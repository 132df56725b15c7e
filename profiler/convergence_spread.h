// The run-to-run spread of convergence curves, for the convergence fit: each evaluation's
// deviation within its cluster size and grid step, the spread's law over cluster sizes, and a
// run's own share of it.
#ifndef SPOTDNN_PROFILER_CONVERGENCE_SPREAD_H_
#define SPOTDNN_PROFILER_CONVERGENCE_SPREAD_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace spotdnn::profiler::fit_internal {

// One evaluation of one run, in the error's unit.
struct Point {
  double step = 0;
  double error = 0;
  int workers = 1;
  double r = 0;
  int run = 0;
};

// Evaluations of all runs grouped at about the same step (runs evaluate on a common grid):
// group index of each point, by round(step / interval).
int GroupOf(double step, double interval);

// Run-to-run spread: per cluster size with at least 3 runs, the robust sd (1.4826 MAD) of each
// evaluation about the median of the same size's evaluations at the same grid step, over points
// with `use(point)`; fitted as sd = a N^b across sizes (b = 0 with one size). Falls back to the
// points' sd about the mean curve (`fitted`) when no size has 3 runs.
std::pair<double, double> SpreadLaw(const std::vector<Point>& points,
                                    const std::vector<double>& fitted, double interval,
                                    const std::function<bool(const Point&)>& use,
                                    std::vector<std::string>* notes, absl::string_view phase);

// How much of the run-to-run spread is a run's own: over the cluster sizes with at least 3 runs,
// each evaluation's deviation from the mean of its size's evaluations at the same grid step (in
// units of that size's robust sd, clipped at 3 so that an outlier weighs little), and the
// correlation of the deviations of every two evaluations of the same run, pooled over the runs:
// sum of d_i d_j over sum of (d_i^2 + d_j^2) / 2. In [0, 0.95]; nullopt with fewer than 3 runs
// of 3 such evaluations each.
std::optional<double> RunShare(const std::vector<Point>& points, double interval,
                               const std::function<bool(const Point&)>& use, int* runs_used);

}  // namespace spotdnn::profiler::fit_internal

#endif  // SPOTDNN_PROFILER_CONVERGENCE_SPREAD_H_
