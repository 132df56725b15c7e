#include "provisioner/deadline/window_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::provisioner::deadline {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Run { kIdle, kSpot, kOnDemand };

// One decision interval of a window: [t, t + len) with the trace's count at t.
struct Segment {
  double t = 0, len = 0;
  int count = 0;
};

// The window's decision intervals: from the start to the next tick, then tick by tick, the last
// one cut at the deadline.
std::vector<Segment> Segments(const AvailabilityTrace& trace, double start_s, double end_s) {
  std::vector<Segment> out;
  size_t tick = trace.TickAt(start_s);
  double t = start_s;
  while (t < end_s - 1e-9) {
    const double next = std::min(static_cast<double>(tick + 1) * trace.gap_s, end_s);
    const int count = tick < trace.counts.size() ? trace.counts[tick] : 0;
    if (next > t) out.push_back({t, next - t, count});
    t = next;
    ++tick;
  }
  return out;
}

bool Whole(double x) { return std::fabs(x - std::round(x)) < 1e-6 && x >= 0; }

}  // namespace

absl::Status ValidateWindowJob(const WindowJob& job) {
  auto positive = [](double v, const char* name) -> absl::Status {
    if (!(std::isfinite(v) && v > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s = %g: must be positive", name, v));
    }
    return absl::OkStatus();
  };
  if (auto s = positive(job.work_s, "work"); !s.ok()) return s;
  if (auto s = positive(job.deadline_s, "deadline"); !s.ok()) return s;
  if (!(std::isfinite(job.changeover_s) && job.changeover_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("changeover = %g: must be >= 0", job.changeover_s));
  }
  if (!(std::isfinite(job.spot_price_per_hour) && job.spot_price_per_hour >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spot-price = %g: must be >= 0", job.spot_price_per_hour));
  }
  if (!(std::isfinite(job.on_demand_price_per_hour) && job.on_demand_price_per_hour >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("on-demand-price = %g: must be >= 0", job.on_demand_price_per_hour));
  }
  return absl::OkStatus();
}

WindowResult ReplayWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                          DeadlinePolicy& policy) {
  WindowResult r;
  r.start_s = start_s;
  r.on_demand_can_meet = job.deadline_s >= job.work_s + job.changeover_s - 1e-9;
  policy.SetHistory(TraceStats(trace, 0, start_s, 1, job.changeover_s));
  const double end = start_s + job.deadline_s;
  Run run = Run::kIdle;
  double rem = 0, progress = 0;
  bool done = false;
  auto bill = [&](Run what, double seconds) {
    const double hours = seconds / 3600;
    if (what == Run::kSpot) {
      r.spot_hours += hours;
      r.cost_usd += hours * job.spot_price_per_hour;
    } else {
      r.on_demand_hours += hours;
      r.cost_usd += hours * job.on_demand_price_per_hour;
    }
  };
  // Runs `len` seconds from `t`; true when the work is done within them.
  auto advance = [&](double t, double len) {
    if (run == Run::kIdle) return false;
    const double unproductive = std::min(len, rem);
    rem -= unproductive;
    const double gain = len - unproductive;
    if (progress + gain >= job.work_s - 1e-9) {
      const double used = unproductive + (job.work_s - progress);
      bill(run, used);
      progress = job.work_s;
      r.finish_s = t + used - start_s;
      return true;
    }
    bill(run, len);
    progress += gain;
    return false;
  };
  size_t tick = trace.TickAt(start_s);
  double t = start_s;
  DeadlineInput in;
  in.changeover_s = job.changeover_s;
  in.spot_price_per_hour = job.spot_price_per_hour;
  in.on_demand_price_per_hour = job.on_demand_price_per_hour;
  in.wanted = 1;
  in.explain = false;
  while (!done && t < end - 1e-9) {
    const double next = std::min(static_cast<double>(tick + 1) * trace.gap_s, end);
    const int count = tick < trace.counts.size() ? trace.counts[tick] : 0;
    ++tick;
    if (!(next > t)) continue;
    const bool up = count >= 1;
    if (run == Run::kSpot && !up) run = Run::kIdle;  // preempted
    in.now_s = t - start_s;
    in.time_left_s = end - t;
    in.work_left_s = job.work_s - progress;
    in.running_spot = run == Run::kSpot ? 1 : 0;
    in.running_on_demand = run == Run::kOnDemand ? 1 : 0;
    in.spot_available = count;
    in.decision_interval_s = next - t;
    const DeadlineDecision d = policy.Decide(in);
    const Run want = d.spot >= 1 && up  ? Run::kSpot
                     : d.on_demand >= 1 ? Run::kOnDemand
                                        : Run::kIdle;
    if (want != run && want != Run::kIdle) {
      ++r.changeovers;
      rem = job.changeover_s;
    }
    run = want;
    done = advance(t, next - t);
    t = next;
  }
  if (!done) {  // missed: finish on on-demand after the deadline
    if (run != Run::kOnDemand) {
      run = Run::kOnDemand;
      ++r.changeovers;
      rem = job.changeover_s;
    }
    const double needed = rem + (job.work_s - progress);
    advance(end, needed + 1);
  }
  r.met = done;
  return r;
}

namespace {

// What the rest of an optimal schedule does from a state: the hours it bills on each kind of
// instance, the instance starts and when the work is done (seconds from the window's start).
struct Tail {
  double spot_s = 0, on_demand_s = 0, finish_s = 0;
  int starts = 0;
};

// The optimum's dynamic program; with kSchedule it also carries the Tail of the chosen schedule
// beside each state's cost (the same choices: ties go the same way).
template <bool kSchedule>
WindowResult Optimum(const AvailabilityTrace& trace, double start_s, const WindowJob& job) {
  WindowResult r;
  r.start_s = start_s;
  r.on_demand_can_meet = job.deadline_s >= job.work_s + job.changeover_s - 1e-9;
  const double end = start_s + job.deadline_s;
  const std::vector<Segment> seg = Segments(trace, start_s, end);
  const int K = static_cast<int>(seg.size());
  auto on_demand_only = [&] {
    // No schedule meets the deadline: on-demand from the start, finishing after it.
    r.met = false;
    r.cost_usd = (job.work_s + job.changeover_s) / 3600 * job.on_demand_price_per_hour;
    r.finish_s = job.work_s + job.changeover_s;
    r.on_demand_hours = (job.work_s + job.changeover_s) / 3600;
    r.spot_hours = 0;
    r.changeovers = 1;
    return r;
  };
  if (K == 0) return on_demand_only();
  // The unit of progress: the greatest common divisor of the whole seconds involved, when they
  // are whole; else 1 s (rounded down). Coarser when the work has too many units.
  double unit = 1;
  if (Whole(trace.gap_s) && Whole(start_s) && Whole(job.deadline_s) && Whole(job.work_s) &&
      Whole(job.changeover_s)) {
    int64_t g = 0;
    for (double v : {trace.gap_s, start_s, job.deadline_s, job.work_s, job.changeover_s}) {
      g = std::gcd(g, static_cast<int64_t>(std::llround(v)));
    }
    unit = static_cast<double>(std::max<int64_t>(1, g));
  }
  if (job.work_s / unit > kMaxOptimumSteps) unit *= std::ceil(job.work_s / unit / kMaxOptimumSteps);
  const int W = static_cast<int>(std::ceil(job.work_s / unit - 1e-9));
  auto units = [&](double seconds) { return static_cast<int>(std::floor(seconds / unit + 1e-9)); };
  const double d = job.changeover_s;
  // Phases of a running instance: j = how many intervals it has run (capped at J, past its
  // changeover for sure).
  const int J = static_cast<int>(std::ceil(d / trace.gap_s)) + 2;
  const int M = 1 + 2 * (J + 1);  // idle, spot phase 0..J, on-demand phase 0..J
  const int stride = W + 1;
  auto mode = [&](int kind, int j) { return 1 + kind * (J + 1) + j; };  // kind 0 spot, 1 od
  const double price[2] = {job.spot_price_per_hour / 3600, job.on_demand_price_per_hour / 3600};
  // Progress bands: at epoch k, progress lies in [lo, hi] to be reachable and still finish.
  std::vector<double> epoch(K + 1);
  for (int k = 0; k < K; ++k) epoch[k] = seg[k].t;
  epoch[K] = end;
  std::vector<int> lo(K + 1), hi(K + 1);
  for (int k = 0; k <= K; ++k) {
    hi[k] = std::min(W - 1, units(epoch[k] - start_s));
    lo[k] = std::max(0, W - static_cast<int>(std::ceil((end - epoch[k]) / unit + 1e-9)));
  }
  const size_t states = static_cast<size_t>(M) * stride;
  std::vector<double> next(states, kInf), cur(states, kInf);
  std::vector<double> start_value(stride);
  // With kSchedule: the tail of each state's schedule, beside `next` and `cur`.
  std::vector<Tail> next_tail(kSchedule ? states : 0), cur_tail(kSchedule ? states : 0);
  std::vector<Tail> start_tail(kSchedule ? stride : 0);
  std::vector<double> rem_buffer(J + 1);
  for (int k = K - 1; k >= 0; --k) {
    const Segment& s = seg[k];
    const bool up = s.count >= 1;
    // The changeover left at this interval's start for an instance in phase j.
    std::vector<double>& rem = rem_buffer;
    for (int j = 0; j <= J; ++j) {
      rem[j] = j == 0 ? d
                      : (j == J || k - j < 0 ? (j == J ? 0 : d)
                                             : std::max(0.0, d - (epoch[k] - epoch[k - j])));
    }
    auto value = [&](int kind, int j, int p) {
      const double unproductive = std::min(s.len, rem[j]);
      const int gain = units(s.len - unproductive);
      if (p + gain >= W) {
        return price[kind] * std::min(s.len, unproductive + (W - p) * unit);
      }
      const int q = p + gain;
      if (q < lo[k + 1] || q > hi[k + 1]) return kInf;
      return price[kind] * s.len + next[static_cast<size_t>(mode(kind, j)) * stride + q];
    };
    // The tail of the choice `value` scored (only asked for a finite value).
    auto tail = [&](int kind, int j, int p) {
      const double unproductive = std::min(s.len, rem[j]);
      const int gain = units(s.len - unproductive);
      Tail t;
      double billed = s.len;
      if (p + gain >= W) {
        billed = std::min(s.len, unproductive + (W - p) * unit);
        t.finish_s = s.t + billed - start_s;
      } else {
        t = next_tail[static_cast<size_t>(mode(kind, j)) * stride + p + gain];
      }
      (kind == 0 ? t.spot_s : t.on_demand_s) += billed;
      return t;
    };
    const int pl = lo[k], ph = hi[k];
    // With the schedule, a choice as cheap as the best so far (to rounding) wins when it finishes
    // sooner: of the optimal schedules, the one reported is among the earliest to finish (waiting
    // and starting later often costs the same).
    auto better = [&](double v, double best, auto tail_of_v, const Tail& best_tail) {
      if constexpr (!kSchedule) {
        return v < best;
      } else {
        if (!std::isfinite(v)) return false;
        if (!std::isfinite(best)) return true;
        const double eps = 1e-9 * std::fabs(best) + 1e-12;
        if (v < best - eps) return true;
        if (v > best + eps) return false;
        return tail_of_v().finish_s < best_tail.finish_s - 1e-9;
      }
    };
    for (int p = pl; p <= ph; ++p) {
      double best = (p >= lo[k + 1] && p <= hi[k + 1]) ? next[p] : kInf;  // idle
      Tail best_tail;
      if constexpr (kSchedule) {
        if (std::isfinite(best)) best_tail = next_tail[p];
      }
      for (int kind : {0, 1}) {
        if (kind == 0 && !up) continue;
        const double v = value(kind, 0, p);
        auto started = [&] {
          Tail t = tail(kind, 0, p);
          ++t.starts;
          return t;
        };
        if (better(v, best, started, best_tail)) {
          best = v;
          if constexpr (kSchedule) best_tail = started();
        }
      }
      start_value[p] = best;
      if constexpr (kSchedule) start_tail[p] = best_tail;
    }
    for (int m = 0; m < M; ++m) {
      double* out = &cur[static_cast<size_t>(m) * stride];
      Tail* out_tail = kSchedule ? &cur_tail[static_cast<size_t>(m) * stride] : nullptr;
      auto keep_start = [&](int p) {
        out[p] = start_value[p];
        if constexpr (kSchedule) out_tail[p] = start_tail[p];
      };
      if (m == 0) {
        for (int p = pl; p <= ph; ++p) keep_start(p);
        continue;
      }
      const int kind = (m - 1) / (J + 1), j = (m - 1) % (J + 1);
      const int jn = std::min(j + 1, J);
      if (kind == 0 && !up) {
        for (int p = pl; p <= ph; ++p) keep_start(p);
        continue;
      }
      for (int p = pl; p <= ph; ++p) {
        const double v = value(kind, jn, p);
        auto continued = [&] { return tail(kind, jn, p); };
        if (better(v, start_value[p], continued, kSchedule ? start_tail[p] : Tail{})) {
          out[p] = v;
          if constexpr (kSchedule) out_tail[p] = continued();
        } else {
          keep_start(p);
        }
      }
    }
    // Outside the band nothing is reachable: the lookups above check the band, so stale values
    // there are never read.
    std::swap(cur, next);
    if constexpr (kSchedule) std::swap(cur_tail, next_tail);
  }
  const double best = (0 >= lo[0] && 0 <= hi[0]) ? next[0] : kInf;
  if (!std::isfinite(best)) return on_demand_only();
  r.met = true;
  r.cost_usd = best;
  if constexpr (kSchedule) {
    const Tail& t = next_tail[0];
    r.finish_s = t.finish_s;
    r.spot_hours = t.spot_s / 3600;
    r.on_demand_hours = t.on_demand_s / 3600;
    r.changeovers = t.starts;
  }
  return r;
}

}  // namespace

WindowResult OptimumWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                           bool with_schedule) {
  return with_schedule ? Optimum<true>(trace, start_s, job) : Optimum<false>(trace, start_s, job);
}

absl::StatusOr<std::vector<double>> WindowStarts(const AvailabilityTrace& trace,
                                                 const WindowJob& job, double every_s) {
  if (auto s = ValidateWindowJob(job); !s.ok()) return s;
  if (!(std::isfinite(every_s) && every_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start-every = %g: must be positive", every_s));
  }
  std::vector<double> starts;
  for (int64_t i = 0;; ++i) {
    const double start = static_cast<double>(i) * every_s;
    if (start + job.deadline_s > trace.duration_s() + 1e-6) break;
    starts.push_back(start);
  }
  if (starts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("deadline = %gs: longer than the trace %s (%gs), so no window fits",
                        job.deadline_s, trace.source, trace.duration_s()));
  }
  return starts;
}

absl::StatusOr<ReplaySummary> ReplayWindows(const AvailabilityTrace& trace, const WindowJob& job,
                                            double every_s, absl::string_view policy) {
  auto starts = WindowStarts(trace, job, every_s);
  if (!starts.ok()) return starts.status();
  const bool optimum = policy == "optimum";
  if (!optimum) {
    auto probe = MakeDeadlinePolicy(policy);
    if (!probe.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(probe.status().message(), " or optimum"));
    }
  }
  ReplaySummary summary;
  summary.policy = std::string(policy);
  int met = 0;
  double cost = 0;
  for (double start : *starts) {
    WindowResult w;
    if (optimum) {
      w = OptimumWindow(trace, start, job);
    } else {
      auto p = MakeDeadlinePolicy(policy);
      w = ReplayWindow(trace, start, job, **p);
    }
    met += w.met ? 1 : 0;
    cost += w.cost_usd;
    summary.spot_hours += w.spot_hours;
    summary.on_demand_hours += w.on_demand_hours;
    summary.changeovers += w.changeovers;
    if (!w.met && w.on_demand_can_meet) ++summary.missed_on_demand_could_meet;
    summary.windows.push_back(w);
  }
  const double n = static_cast<double>(summary.windows.size());
  summary.met_fraction = met / n;
  summary.mean_cost_usd = cost / n;
  return summary;
}

}  // namespace spotdnn::provisioner::deadline
