#include "provisioner/deadline/window_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "provisioner/deadline/zone_choice.h"

namespace spotdnn::provisioner::deadline {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Run { kIdle, kSpot, kOnDemand };

// The zones a replay reads, on one grid: one trace per zone (the single-trace forms have one zone
// without a name), their spot prices per instance-hour.
struct Grid {
  std::vector<const AvailabilityTrace*> traces;
  std::vector<std::string> names;  // empty for the single-trace forms
  std::vector<double> spot_price;
  double gap_s = 0;

  int zones() const { return static_cast<int>(traces.size()); }
  int Count(int z, size_t tick) const {
    const std::vector<int>& c = traces[z]->counts;
    return tick < c.size() ? c[tick] : 0;
  }
};

Grid OneZone(const AvailabilityTrace& trace, const WindowJob& job) {
  Grid g;
  g.traces = {&trace};
  g.spot_price = {job.spot_price_per_hour};
  g.gap_s = trace.gap_s;
  return g;
}

Grid ZonesGrid(const std::vector<Zone>& zones, const WindowJob& job) {
  Grid g;
  for (const Zone& z : zones) {
    g.traces.push_back(&z.trace);
    g.names.push_back(z.name);
    g.spot_price.push_back(z.spot_price_per_hour < 0 ? job.spot_price_per_hour
                                                     : z.spot_price_per_hour);
  }
  g.gap_s = zones.empty() ? 0 : zones.front().trace.gap_s;
  return g;
}

// One decision interval of a window: [t, t + len) in the grid's tick `tick`.
struct Segment {
  double t = 0, len = 0;
  size_t tick = 0;
};

// The window's decision intervals: from the start to the next tick, then tick by tick, the last
// one cut at the deadline.
std::vector<Segment> Segments(const Grid& g, double start_s, double end_s) {
  std::vector<Segment> out;
  size_t tick = g.traces[0]->TickAt(start_s);
  double t = start_s;
  while (t < end_s - 1e-9) {
    const double next = std::min(static_cast<double>(tick + 1) * g.gap_s, end_s);
    if (next > t) out.push_back({t, next - t, tick});
    t = next;
    ++tick;
  }
  return out;
}

// Spot for the job somewhere: 1 at a tick where some zone has its instances, else 0.
AvailabilityTrace UnionTrace(const Grid& g, int instances) {
  AvailabilityTrace u;
  u.source = "the zones together";
  u.gap_s = g.gap_s;
  size_t ticks = 0;
  for (const AvailabilityTrace* t : g.traces) ticks = std::max(ticks, t->counts.size());
  u.counts.assign(ticks, 0);
  for (size_t i = 0; i < ticks; ++i) {
    for (int z = 0; z < g.zones() && u.counts[i] == 0; ++z) {
      if (g.Count(z, i) >= instances) u.counts[i] = 1;
    }
  }
  return u;
}

bool Whole(double x) { return std::fabs(x - std::round(x)) < 1e-6 && x >= 0; }

}  // namespace

absl::StatusOr<std::vector<Zone>> AlignZones(std::vector<Zone> zones) {
  if (zones.empty()) return absl::InvalidArgumentError("zones: none given");
  if (zones.size() > static_cast<size_t>(kMaxZones)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("zones: %d given, at most %d", zones.size(), kMaxZones));
  }
  double gap = kInf, duration = kInf;
  for (size_t i = 0; i < zones.size(); ++i) {
    const Zone& z = zones[i];
    if (z.name.empty()) return absl::InvalidArgumentError("zone: an empty name");
    for (size_t j = 0; j < i; ++j) {
      if (zones[j].name == z.name) {
        return absl::InvalidArgumentError(absl::StrCat("zone \"", z.name, "\": given twice"));
      }
    }
    if (!(z.trace.gap_s > 0) || z.trace.counts.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("zone \"", z.name, "\": an empty trace"));
    }
    if (!std::isfinite(z.spot_price_per_hour)) {
      return absl::InvalidArgumentError(absl::StrCat("zone \"", z.name, "\": a bad spot price"));
    }
    gap = std::min(gap, z.trace.gap_s);
    duration = std::min(duration, z.trace.duration_s());
  }
  const size_t ticks = std::max<size_t>(1, static_cast<size_t>(std::floor(duration / gap + 1e-9)));
  for (Zone& z : zones) {
    if (std::fabs(z.trace.gap_s - gap) < 1e-9) {
      z.trace.counts.resize(std::min(ticks, z.trace.counts.size()));
      continue;
    }
    // Each new tick holds the least count of the old ticks it overlaps.
    std::vector<int> counts(ticks);
    for (size_t i = 0; i < ticks; ++i) {
      const double from = static_cast<double>(i) * gap, to = from + gap;
      size_t a = z.trace.TickAt(from);
      const size_t b = z.trace.TickAt(to - 1e-6);
      int least = z.trace.counts[a];
      for (++a; a <= b; ++a) least = std::min(least, z.trace.counts[a]);
      counts[i] = least;
    }
    z.trace.counts = std::move(counts);
    z.trace.gap_s = gap;
  }
  return zones;
}

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
  if (job.instances < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("instances = %d: must be at least 1", job.instances));
  }
  return absl::OkStatus();
}

namespace {

// Moves what `seen` knows of each zone on from `from_s` to `to_s`.
void Watch(const Grid& g, int instances, double from_s, double to_s,
           std::vector<ZoneHistory>& seen) {
  for (size_t tick = static_cast<size_t>(std::floor(from_s / g.gap_s + 1e-9));
       static_cast<double>(tick) * g.gap_s < to_s - 1e-9; ++tick) {
    const double a = std::max(from_s, static_cast<double>(tick) * g.gap_s);
    const double b = std::min(to_s, static_cast<double>(tick + 1) * g.gap_s);
    if (!(b > a)) continue;
    for (int z = 0; z < g.zones(); ++z) seen[z].Observe(g.Count(z, tick) >= instances, b - a);
  }
}

// The online replay of one window through the grid's zones under `policy`. With several zones,
// `together` is UnionTrace(g, instances) and `seen_before` what was seen of the zones before the
// window's start (each computed here when null).
WindowResult ReplayOn(const Grid& g, double start_s, const WindowJob& job, DeadlinePolicy& policy,
                      const AvailabilityTrace* together = nullptr,
                      const std::vector<ZoneHistory>* seen_before = nullptr) {
  WindowResult r;
  r.start_s = start_s;
  r.on_demand_can_meet = job.deadline_s >= job.work_s + job.changeover_s - 1e-9;
  const int Z = g.zones();
  const int n = std::max(1, job.instances);
  const double d = job.changeover_s;
  AvailabilityTrace union_here;
  if (Z > 1 && together == nullptr) {
    union_here = UnionTrace(g, n);
    together = &union_here;
  }
  policy.SetHistory(Z == 1 ? TraceStats(*g.traces[0], 0, start_s, n, d)
                           : TraceStats(*together, 0, start_s, 1, d));
  // What the zone choice knows of each zone: its price and the availability seen before and
  // during the window.
  std::vector<ZoneOption> options(Z);
  std::vector<ZoneHistory> seen;
  if (Z > 1) {
    for (int z = 0; z < Z; ++z) options[z].spot_price_per_hour = g.spot_price[z];
    if (seen_before != nullptr) {
      seen = *seen_before;
    } else {
      seen.resize(Z);
      Watch(g, n, 0, start_s, seen);
    }
  }
  const double end = start_s + job.deadline_s;
  Run run = Run::kIdle;
  int zone = -1, last_spot_zone = -1;
  double rem = 0, progress = 0;
  bool done = false;
  auto bill = [&](Run what, double seconds) {
    const double hours = seconds / 3600 * n;
    if (what == Run::kSpot) {
      r.spot_hours += hours;
      r.cost_usd += hours * g.spot_price[zone];
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
  double cheapest = g.spot_price[0];
  for (double p : g.spot_price) cheapest = std::min(cheapest, p);
  DeadlineInput in;
  in.changeover_s = d;
  in.on_demand_price_per_hour = n * job.on_demand_price_per_hour;
  in.wanted = 1;  // the job's instances as one unit
  in.explain = false;
  std::vector<char> up(Z);
  for (const Segment& s : Segments(g, start_s, end)) {
    for (int z = 0; z < Z; ++z) up[z] = g.Count(z, s.tick) >= n;
    if (run == Run::kSpot && !up[zone]) run = Run::kIdle;  // preempted
    in.now_s = s.t - start_s;
    in.time_left_s = end - s.t;
    in.work_left_s = job.work_s - progress;
    int choice = up[0] ? 0 : -1;
    if (Z > 1) {
      for (int z = 0; z < Z; ++z) {
        options[z].has_capacity = up[z];
        options[z].seen_s = seen[z].seen_s();
        options[z].seen_up_s = seen[z].seen_up_s();
        options[z].expected_run_s = seen[z].ExpectedStay();
        options[z].median_run_s = seen[z].MedianStay();
      }
      ZoneJob zj;
      zj.current = run == Run::kSpot ? zone : -1;
      zj.work_left_s = in.work_left_s;
      zj.changeover_s = d;
      zj.slack_s = in.time_left_s - in.work_left_s;
      zj.instances = n;
      choice = policy.plain_zone_choice() ? CheapestSpotZone(options, zj.current)
                                          : ChooseSpotZone(options, zj);
    }
    in.running_spot = run == Run::kSpot ? 1 : 0;
    in.running_on_demand = run == Run::kOnDemand ? 1 : 0;
    in.spot_available = choice >= 0 ? 1 : 0;
    in.spot_price_per_hour = n * (choice >= 0 ? g.spot_price[choice] : cheapest);
    in.decision_interval_s = s.len;
    const DeadlineDecision decision = policy.Decide(in);
    const Run want = decision.spot >= 1 && choice >= 0 ? Run::kSpot
                     : decision.on_demand >= 1         ? Run::kOnDemand
                                                       : Run::kIdle;
    const int want_zone = want == Run::kSpot ? choice : -1;
    if (want != Run::kIdle && (want != run || want_zone != zone)) {
      ++r.changeovers;
      rem = d;
      if (want == Run::kSpot) {
        if (last_spot_zone >= 0 && choice != last_spot_zone) ++r.moves;
        last_spot_zone = choice;
        if (!g.names.empty() &&
            std::find(r.zones.begin(), r.zones.end(), g.names[choice]) == r.zones.end()) {
          r.zones.push_back(g.names[choice]);
        }
      }
    }
    run = want;
    zone = want_zone;
    done = advance(s.t, s.len);
    if (done) break;
    if (Z > 1) {
      for (int z = 0; z < Z; ++z) seen[z].Observe(up[z], s.len);
    }
  }
  if (!done) {  // missed: finish on on-demand after the deadline
    if (run != Run::kOnDemand) {
      run = Run::kOnDemand;
      zone = -1;
      ++r.changeovers;
      rem = d;
    }
    const double needed = rem + (job.work_s - progress);
    advance(end, needed + 1);
  }
  r.met = done;
  return r;
}

}  // namespace

WindowResult ReplayWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                          DeadlinePolicy& policy) {
  return ReplayOn(OneZone(trace, job), start_s, job, policy);
}

WindowResult ReplayZonesWindow(const std::vector<Zone>& zones, double start_s, const WindowJob& job,
                               DeadlinePolicy& policy) {
  return ReplayOn(ZonesGrid(zones, job), start_s, job, policy);
}

namespace {

// What the rest of an optimal schedule does from a state: the hours it bills on each kind of
// instance, the instance starts and when the work is done (seconds from the window's start).
struct Tail {
  double spot_s = 0, on_demand_s = 0, finish_s = 0;
  int starts = 0;
  uint64_t zones = 0;   // the zones its spot runs use, a bit per zone
  int first_zone = -1;  // the zone of its first spot run
  int moves = 0;        // spot runs in another zone than the spot run before
};

// The optimum's dynamic program; with kSchedule it also carries the Tail of the chosen schedule
// beside each state's cost (the same choices: ties go the same way).
//
// The modes of the state: idle, and per kind of instance (spot in zone z for z < Z, on-demand as
// kind Z) its phase j = how many intervals it has run (capped at J, past its changeover for sure).
template <bool kSchedule>
WindowResult Optimum(const Grid& g, double start_s, const WindowJob& job) {
  WindowResult r;
  r.start_s = start_s;
  r.on_demand_can_meet = job.deadline_s >= job.work_s + job.changeover_s - 1e-9;
  const int n = std::max(1, job.instances);
  const int Z = g.zones();
  const double end = start_s + job.deadline_s;
  const std::vector<Segment> seg = Segments(g, start_s, end);
  const int K = static_cast<int>(seg.size());
  auto on_demand_only = [&] {
    // No schedule meets the deadline: on-demand from the start, finishing after it.
    r.met = false;
    r.cost_usd = (job.work_s + job.changeover_s) / 3600 * job.on_demand_price_per_hour * n;
    r.finish_s = job.work_s + job.changeover_s;
    r.on_demand_hours = (job.work_s + job.changeover_s) / 3600 * n;
    r.spot_hours = 0;
    r.changeovers = 1;
    return r;
  };
  if (K == 0) return on_demand_only();
  // The unit of progress: the greatest common divisor of the whole seconds involved, when they
  // are whole; else 1 s (rounded down). Coarser when the work has too many units.
  double unit = 1;
  if (Whole(g.gap_s) && Whole(start_s) && Whole(job.deadline_s) && Whole(job.work_s) &&
      Whole(job.changeover_s)) {
    int64_t common = 0;
    for (double v : {g.gap_s, start_s, job.deadline_s, job.work_s, job.changeover_s}) {
      common = std::gcd(common, static_cast<int64_t>(std::llround(v)));
    }
    unit = static_cast<double>(std::max<int64_t>(1, common));
  }
  if (job.work_s / unit > kMaxOptimumSteps) unit *= std::ceil(job.work_s / unit / kMaxOptimumSteps);
  const int W = static_cast<int>(std::ceil(job.work_s / unit - 1e-9));
  auto units = [&](double seconds) { return static_cast<int>(std::floor(seconds / unit + 1e-9)); };
  const double d = job.changeover_s;
  const int J = static_cast<int>(std::ceil(d / g.gap_s)) + 2;
  const int M = 1 + (Z + 1) * (J + 1);
  const int stride = W + 1;
  auto mode = [&](int kind, int j) { return 1 + kind * (J + 1) + j; };
  std::vector<double> price(Z + 1);  // per second, for the job's instances
  for (int z = 0; z < Z; ++z) price[z] = g.spot_price[z] / 3600 * n;
  price[Z] = job.on_demand_price_per_hour / 3600 * n;
  std::vector<char> up(Z);
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
    for (int z = 0; z < Z; ++z) up[z] = g.Count(z, s.tick) >= n;
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
      if (kind == Z) {
        t.on_demand_s += billed;
        return t;
      }
      t.spot_s += billed;
      t.zones |= uint64_t{1} << kind;
      if (t.first_zone >= 0 && t.first_zone != kind) ++t.moves;
      t.first_zone = kind;
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
      for (int kind = 0; kind <= Z; ++kind) {
        if (kind < Z && !up[kind]) continue;
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
      if (kind < Z && !up[kind]) {
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
    r.spot_hours = t.spot_s / 3600 * n;
    r.on_demand_hours = t.on_demand_s / 3600 * n;
    r.changeovers = t.starts;
    r.moves = t.moves;
    for (int z = 0; z < Z && !g.names.empty(); ++z) {
      if (t.zones & (uint64_t{1} << z)) r.zones.push_back(g.names[z]);
    }
  }
  return r;
}

}  // namespace

WindowResult OptimumWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                           bool with_schedule) {
  const Grid g = OneZone(trace, job);
  return with_schedule ? Optimum<true>(g, start_s, job) : Optimum<false>(g, start_s, job);
}

WindowResult OptimumZonesWindow(const std::vector<Zone>& zones, double start_s,
                                const WindowJob& job, bool with_schedule) {
  const Grid g = ZonesGrid(zones, job);
  return with_schedule ? Optimum<true>(g, start_s, job) : Optimum<false>(g, start_s, job);
}

namespace {

// Window starts 0, every, ... while the window fits in `duration_s` (the trace `source`'s).
absl::StatusOr<std::vector<double>> Starts(double duration_s, absl::string_view source,
                                           const WindowJob& job, double every_s) {
  if (auto s = ValidateWindowJob(job); !s.ok()) return s;
  if (!(std::isfinite(every_s) && every_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start-every = %g: must be positive", every_s));
  }
  std::vector<double> starts;
  for (int64_t i = 0;; ++i) {
    const double start = static_cast<double>(i) * every_s;
    if (start + job.deadline_s > duration_s + 1e-6) break;
    starts.push_back(start);
  }
  if (starts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("deadline = %gs: longer than the trace %s (%gs), so no window fits",
                        job.deadline_s, source, duration_s));
  }
  return starts;
}

// Every window of the grid under `policy` ("optimum" or a MakeDeadlinePolicy name).
absl::StatusOr<ReplaySummary> ReplayAll(const Grid& g, double duration_s, absl::string_view source,
                                        const WindowJob& job, double every_s,
                                        absl::string_view policy, const ReplayProgress& progress) {
  auto starts = Starts(duration_s, source, job, every_s);
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
  // The windows are independent: replayed on every core, each thread a run of consecutive
  // windows (what it has seen of the zones carries from one window's start to the next).
  const size_t total = starts->size();
  const int n = std::max(1, job.instances);
  AvailabilityTrace together;
  if (g.zones() > 1) together = UnionTrace(g, n);
  std::vector<WindowResult> results(total);
  std::mutex progress_mutex;
  size_t done = 0;
  const size_t threads = std::min<size_t>(total, std::max(1u, std::thread::hardware_concurrency()));
  auto work = [&](size_t from, size_t to) {
    std::vector<ZoneHistory> seen(g.zones() > 1 ? g.zones() : 0);
    double watched = 0;
    for (size_t i = from; i < to; ++i) {
      const double start = (*starts)[i];
      if (optimum) {
        results[i] = Optimum<true>(g, start, job);
      } else {
        if (!seen.empty()) Watch(g, n, watched, start, seen);
        watched = start;
        auto p = MakeDeadlinePolicy(policy);
        results[i] = ReplayOn(g, start, job, **p, seen.empty() ? nullptr : &together,
                              seen.empty() ? nullptr : &seen);
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(++done, total);
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back(work, total * t / threads, total * (t + 1) / threads);
  }
  work(0, total / threads);
  for (std::thread& t : pool) t.join();
  int met = 0;
  double cost = 0;
  for (WindowResult& w : results) {
    met += w.met ? 1 : 0;
    cost += w.cost_usd;
    summary.spot_hours += w.spot_hours;
    summary.on_demand_hours += w.on_demand_hours;
    summary.changeovers += w.changeovers;
    summary.moves += w.moves;
    if (!w.met && w.on_demand_can_meet) ++summary.missed_on_demand_could_meet;
    summary.windows.push_back(std::move(w));
  }
  const double count = static_cast<double>(summary.windows.size());
  summary.met_fraction = met / count;
  summary.mean_cost_usd = cost / count;
  return summary;
}

}  // namespace

absl::StatusOr<std::vector<double>> WindowStarts(const AvailabilityTrace& trace,
                                                 const WindowJob& job, double every_s) {
  return Starts(trace.duration_s(), trace.source, job, every_s);
}

absl::StatusOr<ReplaySummary> ReplayWindows(const AvailabilityTrace& trace, const WindowJob& job,
                                            double every_s, absl::string_view policy) {
  return ReplayAll(OneZone(trace, job), trace.duration_s(), trace.source, job, every_s, policy,
                   nullptr);
}

absl::StatusOr<ReplaySummary> ReplayZoneWindows(const std::vector<Zone>& zones,
                                                const WindowJob& job, double every_s,
                                                absl::string_view policy,
                                                const ReplayProgress& progress) {
  if (zones.empty()) return absl::InvalidArgumentError("zones: none given");
  double duration = zones.front().trace.duration_s();
  for (const Zone& z : zones) duration = std::min(duration, z.trace.duration_s());
  return ReplayAll(ZonesGrid(zones, job), duration,
                   zones.size() == 1 ? zones.front().trace.source : "of the zones", job, every_s,
                   policy, progress);
}

}  // namespace spotdnn::provisioner::deadline
