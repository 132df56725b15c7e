// Deadline policies against the omniscient optimum. For every trace in
// SPOTDNN_DATA_DIR/bamboo-spot and for synthetic traces with long outages (45 days of 195 s ticks,
// availability 17-90%, heavy-tailed outages), it replays every window of several work/deadline
// pairs (changeover 12 min, spot $0.918/h, on-demand $3.06/h: a V100 on AWS) under ours,
// uniform-progress, greedy, on-demand and the optimum, and prints the met fraction and the mean
// cost (and its excess over the optimum); then nine synthetic zones of one type (independent, and
// with shared droughts) replayed with moves between zones against the optimum across zones and
// the best single zone; then the timings of one window replay, one optimum DP, 10,000 windows
// over nine zones and 10,000 runs of the cluster simulator.
//
//   deadline_bench [--tune] [--quick] [--zones] [--timings] [--reserve-changeovers N]
//   [--supply-factor F]
//   [--hysteresis-h H] [--prior-rate R]
//                  [--prior-weight-h H] [--back-margin-h H]
// The flags override ours' constants (for tuning); --quick runs the synthetic grids only, --zones
// the zones' grid only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/deadline_policy.h"
#include "provisioner/deadline/synthetic_trace.h"
#include "provisioner/deadline/window_replay.h"

namespace {

using namespace spotdnn::provisioner::deadline;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Totals {
  int windows = 0, met = 0, missed_od_could = 0;
  double cost = 0;
};

OursOptions g_ours;

// Replays all windows of one trace and job under every policy; adds to the totals.
void Replay(const AvailabilityTrace& trace, const WindowJob& job, double every,
            std::map<std::string, Totals>* totals, bool print) {
  const char* policies[] = {"optimum", "ours", "uniform-progress", "greedy", "on-demand"};
  auto starts = WindowStarts(trace, job, every);
  if (!starts.ok()) {
    if (print) std::printf("  (skipped: %s)\n", std::string(starts.status().message()).c_str());
    return;
  }
  std::map<std::string, Totals> here;
  for (double start : *starts) {
    for (const char* name : policies) {
      WindowResult w;
      if (std::string(name) == "optimum") {
        w = OptimumWindow(trace, start, job, /*with_schedule=*/false);
      } else if (std::string(name) == "ours") {
        auto p = MakeOursPolicy(g_ours);
        w = ReplayWindow(trace, start, job, *p);
      } else {
        auto p = MakeDeadlinePolicy(name);
        w = ReplayWindow(trace, start, job, **p);
      }
      Totals& t = here[name];
      ++t.windows;
      t.met += w.met;
      t.missed_od_could += (!w.met && w.on_demand_can_meet);
      t.cost += w.cost_usd;
    }
  }
  const double opt = here["optimum"].cost / here["optimum"].windows;
  if (print) {
    std::printf("  W %4.1fh D %4.1fh %3zu windows:", job.work_s / 3600, job.deadline_s / 3600,
                starts->size());
  }
  for (const char* name : policies) {
    const Totals& t = here[name];
    Totals& all = (*totals)[name];
    all.windows += t.windows;
    all.met += t.met;
    all.missed_od_could += t.missed_od_could;
    all.cost += t.cost;
    if (print) {
      const double mean = t.cost / t.windows;
      std::printf("  %s %.2f $%.1f %+.1f%%", name == std::string("uniform-progress") ? "UP" : name,
                  static_cast<double>(t.met) / t.windows, mean, 100 * (mean / opt - 1));
    }
  }
  if (print) std::printf("\n");
}

void PrintTotals(const char* title, const std::map<std::string, Totals>& totals) {
  const double opt = totals.at("optimum").cost / totals.at("optimum").windows;
  std::printf("%s\n  %-17s %8s %9s %12s %10s %s\n", title, "policy", "windows", "met", "mean cost",
              "vs optimum", "missed where on-demand could meet");
  for (const char* name : {"optimum", "ours", "uniform-progress", "greedy", "on-demand"}) {
    const Totals& t = totals.at(name);
    const double mean = t.cost / t.windows;
    std::printf("  %-17s %8d %9.4f %11.2f$ %+9.1f%% %d\n", name, t.windows,
                static_cast<double>(t.met) / t.windows, mean, 100 * (mean / opt - 1),
                t.missed_od_could);
  }
}

// Nine synthetic zones of one type, availability 17-90% (45 days, 195 s ticks); with
// `correlated`, every zone also goes dry in shared droughts (about 1% of the time, hours long), as
// real zones of one region do; without, the zones are independent.
std::vector<Zone> SyntheticZones(bool correlated, uint64_t seed) {
  const double availabilities[] = {0.17, 0.3, 0.45, 0.55, 0.65, 0.72, 0.8, 0.85, 0.9};
  AvailabilityTrace drought;
  if (correlated) {
    SyntheticTraceOptions so;
    so.availability = 0.99;
    so.mean_outage_s = 3 * 3600;
    so.seed = seed * 100 + 99;
    drought = SyntheticTrace(so);
  }
  std::vector<Zone> zones;
  for (int i = 0; i < 9; ++i) {
    SyntheticTraceOptions so;
    so.availability = availabilities[i];
    so.mean_outage_s = (1 + i % 3) * 2 * 3600;
    so.seed = seed * 100 + static_cast<uint64_t>(i);
    AvailabilityTrace t = SyntheticTrace(so);
    if (correlated) {
      for (size_t k = 0; k < t.counts.size() && k < drought.counts.size(); ++k) {
        t.counts[k] = std::min(t.counts[k], drought.counts[k]);
      }
    }
    zones.push_back({"z" + std::to_string(i + 1), std::move(t), -1});
  }
  return *AlignZones(std::move(zones));
}

// The multi-zone grid: ours and greedy moving between the zones, the best single zone in
// hindsight (ours kept to it, and the optimum kept to it), and the optimum across the zones.
void ZoneGrid() {
  std::printf(
      "\nNine synthetic zones (45 days, 195 s ticks, availability 17-90%%; windows every 48 h, "
      "changeover 12 min, spot $0.918/h, on-demand $3.06/h):\n");
  std::printf("  %-12s %-9s %-36s %7s %10s %10s %7s\n", "zones", "W/D", "policy", "met",
              "mean cost", "vs optimum", "moves");
  for (bool correlated : {false, true}) {
    for (auto [w, d] : std::vector<std::pair<double, double>>{{24, 36}, {24, 30}, {12, 24}}) {
      WindowJob job;
      job.work_s = w * 3600;
      job.deadline_s = d * 3600;
      double total[5] = {0, 0, 0, 0, 0};
      double met[5] = {0, 0, 0, 0, 0};
      int moves[5] = {0, 0, 0, 0, 0};
      for (uint64_t seed : {1, 2}) {
        const std::vector<Zone> zones = SyntheticZones(correlated, seed);
        auto opt = ReplayZoneWindows(zones, job, 48 * 3600, "optimum");
        auto ours = ReplayZoneWindows(zones, job, 48 * 3600, "ours");
        auto greedy = ReplayZoneWindows(zones, job, 48 * 3600, "greedy");
        double best_ours = 1e300, best_opt = 1e300, best_ours_met = 0, best_opt_met = 0;
        for (const Zone& z : zones) {
          auto o = ReplayWindows(z.trace, job, 48 * 3600, "ours");
          auto b = ReplayWindows(z.trace, job, 48 * 3600, "optimum");
          if (o->mean_cost_usd < best_ours)
            best_ours = o->mean_cost_usd, best_ours_met = o->met_fraction;
          if (b->mean_cost_usd < best_opt)
            best_opt = b->mean_cost_usd, best_opt_met = b->met_fraction;
        }
        const double costs[5] = {opt->mean_cost_usd, ours->mean_cost_usd, greedy->mean_cost_usd,
                                 best_ours, best_opt};
        const double mets[5] = {opt->met_fraction, ours->met_fraction, greedy->met_fraction,
                                best_ours_met, best_opt_met};
        const int ms[5] = {opt->moves, ours->moves, greedy->moves, 0, 0};
        for (int i = 0; i < 5; ++i) {
          total[i] += costs[i] / 2;
          met[i] += mets[i] / 2;
          moves[i] += ms[i];
        }
      }
      const char* names[5] = {"optimum across zones", "ours across zones", "greedy across zones",
                              "ours in the best single zone", "optimum in the best single zone"};
      for (int i = 0; i < 5; ++i) {
        std::printf("  %-12s %2.0f/%-6.0f %-36s %7.3f %9.2f$ %+9.1f%% %7d\n",
                    correlated ? "correlated" : "independent", w, d, names[i], met[i], total[i],
                    100 * (total[i] / total[0] - 1), moves[i]);
      }
    }
  }
  // The speed the one-instance form needs: 10,000 windows over nine zones (the optimum excepted).
  const std::vector<Zone> zones = SyntheticZones(true, 1);
  WindowJob job;
  job.work_s = 24 * 3600;
  job.deadline_s = 36 * 3600;
  const double every = (zones[0].trace.duration_s() - job.deadline_s) / 9999;
  const auto t0 = Clock::now();
  auto all = ReplayZoneWindows(zones, job, every, "ours");
  const auto t1 = Clock::now();
  std::printf("  %zu windows of W 24h D 36h over nine zones (ours, every core): %.0f ms\n",
              all->windows.size(), Ms(t0, t1));
}

}  // namespace

// --tune: the optimum of every synthetic window once, then ours under a grid of constants.
int Tune() {
  struct Case {
    AvailabilityTrace trace;
    WindowJob job;
    std::vector<double> starts;
    std::vector<double> optimum;
  };
  std::vector<Case> cases;
  const std::vector<std::pair<double, double>> pairs = {
      {24, 30}, {24, 36}, {24, 48}, {24, 72}, {12, 24}};
  int seed = 101;
  double opt_total = 0;
  // The optimum of every window is cached in a file between runs (it takes minutes).
  const char* cache = "/tmp/deadline_bench_optimum_cache.txt";
  std::FILE* cached = std::fopen(cache, "r");
  std::FILE* out = cached ? nullptr : std::fopen(cache, "w");
  int n = 0;
  for (double a : {0.17, 0.3, 0.45, 0.6, 0.75, 0.9}) {
    for (double o : {2.0, 6.0, 12.0}) {
      SyntheticTraceOptions so;
      so.availability = a;
      so.mean_outage_s = o * 3600;
      so.seed = seed++;
      const AvailabilityTrace trace = SyntheticTrace(so);
      for (auto [w, d] : pairs) {
        Case c;
        c.trace = trace;
        c.job.work_s = w * 3600;
        c.job.deadline_s = d * 3600;
        c.starts = *WindowStarts(trace, c.job, 36 * 3600);
        for (double s : c.starts) {
          double v;
          if (cached && std::fscanf(cached, "%lf", &v) == 1) {
            c.optimum.push_back(v);
          } else {
            c.optimum.push_back(OptimumWindow(trace, s, c.job, /*with_schedule=*/false).cost_usd);
            if (out) std::fprintf(out, "%.17g\n", c.optimum.back());
          }
          opt_total += c.optimum.back();
          ++n;
        }
        cases.push_back(std::move(c));
      }
    }
  }
  if (cached) std::fclose(cached);
  if (out) std::fclose(out);
  std::printf("%d windows, optimum mean $%.2f\n", n, opt_total / n);
  auto score = [&](auto make) {
    double total = 0;
    int missed = 0;
    for (const Case& c : cases) {
      for (double s : c.starts) {
        auto p = make();
        const WindowResult w = ReplayWindow(c.trace, s, c.job, *p);
        total += w.cost_usd;
        missed += !w.met;
      }
    }
    return std::pair{100 * (total / opt_total - 1), missed};
  };
  for (const char* name : {"uniform-progress", "greedy"}) {
    auto [x, m] = score([&] { return *MakeDeadlinePolicy(name); });
    std::printf("%s %+.2f%% missed %d\n", name, x, m);
  }
  for (double reserve : {6.0, 8.0, 10.0}) {
    for (bool only_if_pay : {false, true}) {
      OursOptions o = g_ours;
      o.reserve_changeovers = reserve;
      o.reserve_only_if_returns_pay = only_if_pay;
      auto [x, m] = score([&] { return MakeOursPolicy(o); });
      std::printf("ours reserve %.0f changeovers, only if returns pay %d: %+.2f%% missed %d\n",
                  reserve, only_if_pay, x, m);
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  bool quick = false, timings_only = false, zones_only = false;
  if (argc > 1 && !std::strcmp(argv[1], "--tune")) return Tune();
  for (int i = 1; i < argc; ++i) {
    auto value = [&] { return i + 1 < argc ? std::atof(argv[++i]) : 0.0; };
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--zones"))
      zones_only = true;
    else if (!std::strcmp(argv[i], "--timings"))
      timings_only = true;
    else if (!std::strcmp(argv[i], "--reserve-changeovers"))
      g_ours.reserve_changeovers = value();
    else if (!std::strcmp(argv[i], "--supply-factor"))
      g_ours.supply_factor = value();
    else if (!std::strcmp(argv[i], "--hysteresis-h"))
      g_ours.stop_hysteresis_s = value() * 3600;
    else if (!std::strcmp(argv[i], "--prior-rate"))
      g_ours.prior_rate = value();
    else if (!std::strcmp(argv[i], "--prior-weight-h"))
      g_ours.prior_weight_s = value() * 3600;
    else if (!std::strcmp(argv[i], "--back-margin-h"))
      g_ours.back_to_spot_margin_s = value() * 3600;
  }
  const std::vector<std::pair<double, double>> pairs = {
      {24, 30}, {24, 36}, {24, 48}, {24, 72}, {12, 24}};
  auto job_of = [](double w, double d) {
    WindowJob job;
    job.work_s = w * 3600;
    job.deadline_s = d * 3600;
    return job;
  };

  if (zones_only) {
    ZoneGrid();
    return 0;
  }
  if (!quick && !timings_only) {
    const std::filesystem::path dir = std::filesystem::path(SPOTDNN_DATA_DIR) / "bamboo-spot";
    if (!std::filesystem::exists(dir)) {
      std::printf("%s not found: skipping the Bamboo traces\n", dir.c_str());
    } else {
      std::vector<std::string> files;
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() == ".csv") files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
      std::printf(
          "Bamboo traces (one instance: spot when the group's count >= 1; windows every "
          "1 h):\n");
      std::map<std::string, Totals> totals;
      for (const std::string& f : files) {
        auto trace = ReadAvailabilityTrace(f);
        if (!trace.ok()) {
          std::printf("%s\n", std::string(trace.status().message()).c_str());
          continue;
        }
        auto stats = TraceStats(*trace, 0, trace->duration_s(), 1, 720);
        std::printf("%s: %.1f h, availability %.2f\n", std::filesystem::path(f).filename().c_str(),
                    trace->duration_s() / 3600, stats.available_s / stats.observed_s);
        for (auto [w, d] : std::vector<std::pair<double, double>>{{4, 6}, {4, 8}, {8, 12}}) {
          Replay(*trace, job_of(w, d), 3600, &totals, true);
        }
      }
      if (!totals.empty()) PrintTotals("Bamboo, all windows:", totals);
    }
  }

  std::printf("\nSynthetic long-outage traces (45 days, 195 s ticks; windows every 24 h):\n");
  std::map<std::string, Totals> totals;
  if (!timings_only) {
    const double availabilities[] = {0.17, 0.3, 0.45, 0.6, 0.75, 0.9};
    const double outages_h[] = {2, 6, 12};
    int seed = 1;
    for (double a : availabilities) {
      for (double o : outages_h) {
        SyntheticTraceOptions so;
        so.availability = a;
        so.mean_outage_s = o * 3600;
        so.seed = seed++;
        const AvailabilityTrace trace = SyntheticTrace(so);
        auto stats = TraceStats(trace, 0, trace.duration_s(), 1, 720);
        if (!quick) {
          std::printf("%s: availability %.2f, longest outage %.1f h\n", trace.source.c_str(),
                      stats.available_s / stats.observed_s, stats.longest_down_s / 3600);
        }
        for (auto [w, d] : pairs) Replay(trace, job_of(w, d), 24 * 3600, &totals, !quick);
      }
    }
    PrintTotals("Synthetic, all windows:", totals);
  }

  if (!timings_only) ZoneGrid();

  // Timings.
  SyntheticTraceOptions so;
  so.availability = 0.5;
  const AvailabilityTrace trace = SyntheticTrace(so);
  WindowJob job = job_of(24, 48);
  const int reps = 200;
  auto t0 = Clock::now();
  double sink = 0;
  for (int i = 0; i < reps; ++i) {
    auto p = MakeDeadlinePolicy("ours");
    sink += ReplayWindow(trace, 86400.0 * (i % 40), job, **p).cost_usd;
  }
  auto t1 = Clock::now();
  std::printf("\nTimings: one window replay (ours, W 24h D 48h, history up to 40 days) %.3f ms\n",
              Ms(t0, t1) / reps);
  // A whole-trace replay: one window spanning the 45 days.
  WindowJob long_job = job_of(24 * 20, 45 * 24 - 1);
  t0 = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto p = MakeDeadlinePolicy("ours");
    sink += ReplayWindow(trace, 0, long_job, **p).cost_usd;
  }
  t1 = Clock::now();
  std::printf("         one 45-day window replay (ours, 19,938 ticks) %.3f ms\n", Ms(t0, t1) / 20);
  for (double d : {36.0, 48.0, 72.0}) {
    job = job_of(24, d);
    t0 = Clock::now();
    for (int i = 0; i < 5; ++i) {
      sink += OptimumWindow(trace, 86400.0 * (5 + i), job, /*with_schedule=*/false).cost_usd;
    }
    t1 = Clock::now();
    const auto t2 = Clock::now();
    for (int i = 0; i < 5; ++i) sink += OptimumWindow(trace, 86400.0 * (5 + i), job).finish_s;
    const auto t3 = Clock::now();
    std::printf(
        "         optimum DP, W 24h D %.0fh: %.1f ms per window (%.1f ms with the schedule: "
        "finish, hours, changeovers)\n",
        d, Ms(t0, t1) / 5, Ms(t2, t3) / 5);
  }
  if (sink < 0) std::printf("%g\n", sink);
  return 0;
}
