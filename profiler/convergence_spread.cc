// The run-to-run spread of convergence curves: deviations by cluster size and grid step, the
// spread's law over cluster sizes, and a run's own share of it.
#include "profiler/convergence_spread.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "profiler/fit_common.h"

namespace spotdnn::profiler::fit_internal {
namespace {

// Each evaluation's deviation from the mean of its cluster size's evaluations at the same grid
// step, per cluster size with at least 3 runs (cells of at least 3 evaluations), over points with
// `use(point)`: workers -> (run, deviation). Scaled by sqrt(k / (k - 1)) so that each is
// distributed as one run's deviation from the curve (a cell of k runs pulls its mean towards its
// points).
std::map<int, std::vector<std::pair<int, double>>> CellDeviations(
    const std::vector<Point>& points, double interval,
    const std::function<bool(const Point&)>& use) {
  std::map<std::pair<int, int>, std::pair<double, int>> cells;  // (workers, group) -> sum, count
  std::map<int, std::set<int>> runs_of;
  for (const Point& p : points) {
    if (!use(p)) continue;
    auto& cell = cells[{p.workers, GroupOf(p.step, interval)}];
    cell.first += p.error;
    ++cell.second;
    runs_of[p.workers].insert(p.run);
  }
  std::map<int, std::vector<std::pair<int, double>>> by_size;
  for (const Point& p : points) {
    if (!use(p) || runs_of[p.workers].size() < 3) continue;
    const auto& [sum, k] = cells[{p.workers, GroupOf(p.step, interval)}];
    if (k < 3) continue;
    by_size[p.workers].push_back(
        {p.run, (p.error - sum / k) * std::sqrt(static_cast<double>(k) / (k - 1))});
  }
  return by_size;
}

}  // namespace

// Evaluations of all runs grouped at about the same step (runs evaluate on a common grid):
// group index of each point, by round(step / interval).
int GroupOf(double step, double interval) {
  return interval > 0 ? static_cast<int>(std::lround(step / interval)) : 0;
}

// Run-to-run spread: per cluster size with at least 3 runs, the robust sd (1.4826 MAD) of each
// evaluation about the median of the same size's evaluations at the same grid step, over points
// with `use(point)`; fitted as sd = a N^b across sizes (b = 0 with one size). Falls back to the
// points' sd about the mean curve (`fitted`) when no size has 3 runs.
std::pair<double, double> SpreadLaw(const std::vector<Point>& points,
                                    const std::vector<double>& fitted, double interval,
                                    const std::function<bool(const Point&)>& use,
                                    std::vector<std::string>* notes, absl::string_view phase) {
  // The robust sd of the deviations is the spread, so that a run far off (an outlier) weighs
  // little.
  std::map<int, std::vector<double>> deviations;
  for (const auto& [n, devs] : CellDeviations(points, interval, use)) {
    for (const auto& [run, d] : devs) deviations[n].push_back(std::abs(d));
  }
  std::vector<double> xs, ys, ws;
  for (const auto& [n, dev] : deviations) {
    if (dev.size() < 6) continue;
    const double sd = 1.4826 * Median(dev);
    if (!(sd > 0)) continue;
    xs.push_back(std::log(n));
    ys.push_back(std::log(sd));
    ws.push_back(dev.size());
  }
  if (xs.empty()) {
    std::vector<double> dev;
    for (size_t i = 0; i < points.size(); ++i) {
      if (use(points[i])) dev.push_back(std::abs(points[i].error - fitted[i]));
    }
    if (dev.empty()) return {0, 0};
    notes->push_back(absl::StrCat("run-to-run spread ", phase,
                                  ": no cluster size has 3 runs; taken from the scatter about "
                                  "the fitted curve"));
    return {1.4826 * Median(dev), 0};
  }
  double w = 0, mx = 0, my = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    w += ws[i];
    mx += ws[i] * xs[i];
    my += ws[i] * ys[i];
  }
  mx /= w;
  my /= w;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    sxx += ws[i] * (xs[i] - mx) * (xs[i] - mx);
    sxy += ws[i] * (xs[i] - mx) * (ys[i] - my);
  }
  const double b = sxx > 1e-12 ? sxy / sxx : 0;
  return {std::exp(my - b * mx), b};
}

// How much of the run-to-run spread is a run's own: over the cluster sizes with at least 3 runs,
// each evaluation's deviation from the mean of its size's evaluations at the same grid step (in
// units of that size's robust sd, clipped at 3 so that an outlier weighs little), and the
// correlation of the deviations of every two evaluations of the same run, pooled over the runs:
// sum of d_i d_j over sum of (d_i^2 + d_j^2) / 2. In [0, 0.95]; nullopt with fewer than 3 runs
// of 3 such evaluations each.
std::optional<double> RunShare(const std::vector<Point>& points, double interval,
                               const std::function<bool(const Point&)>& use, int* runs_used) {
  double num = 0, den = 0;
  int runs = 0;
  for (const auto& [n, devs] : CellDeviations(points, interval, use)) {
    std::vector<double> abs_dev;
    for (const auto& [run, d] : devs) abs_dev.push_back(std::abs(d));
    const double sd = 1.4826 * Median(abs_dev);
    if (!(sd > 0)) continue;
    std::map<int, std::vector<double>> of_run;
    for (const auto& [run, d] : devs) of_run[run].push_back(std::clamp(d / sd, -3.0, 3.0));
    for (auto& [run, z] : of_run) {
      if (z.size() < 3) continue;
      // A run that logs every step: 64 of its evaluations, evenly spread, are enough.
      if (z.size() > 64) {
        std::vector<double> kept;
        for (size_t i = 0; i < 64; ++i) kept.push_back(z[i * (z.size() - 1) / 63]);
        z = std::move(kept);
      }
      ++runs;
      for (size_t i = 0; i < z.size(); ++i) {
        for (size_t j = i + 1; j < z.size(); ++j) {
          num += z[i] * z[j];
          den += (z[i] * z[i] + z[j] * z[j]) / 2;
        }
      }
    }
  }
  *runs_used = runs;
  if (runs < 3 || !(den > 0)) return std::nullopt;
  return std::clamp(num / den, 0.0, 0.95);
}

}  // namespace spotdnn::profiler::fit_internal
