// The online deadline policies. All of them reason about one "unit" (the `wanted` instances of a
// type together): spot is usable when capacity allows all of them, and the slack is the time left
// minus the work left. Every policy keeps the same safety invariant, which is what makes "never
// miss a deadline on-demand alone could meet" hold: it starts spot only with at least two
// changeovers of slack (one for spot's start, one for on-demand's after a preemption), it waits
// only while a changeover plus one decision interval of slack remains, and otherwise it runs
// on-demand, where the slack no longer shrinks.
#include "provisioner/deadline/deadline_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace spotdnn::provisioner::deadline {
namespace {

constexpr double kEps = 1e-6;
constexpr double kHuge = 1e300;

enum class Mode { kIdle, kSpot, kOnDemand };

// The facts every policy derives from its input.
struct View {
  double slack = 0;  // time left - work left
  double work = 0;
  double left = 0;
  double d = 0;
  double interval = 0;
  bool spot_up = false;  // capacity for all wanted instances (or unknown: probe)
  bool on_spot = false;  // all wanted instances on spot
  bool on_demand = false;
};

View See(const DeadlineInput& in) {
  View v;
  v.work = std::max(0.0, in.work_left_s);
  v.left = in.time_left_s;
  v.slack = in.time_left_s - v.work;
  v.d = std::max(0.0, in.changeover_s);
  v.interval = std::max(0.0, in.decision_interval_s);
  const int wanted = std::max(1, in.wanted);
  v.spot_up = in.spot_available < 0 || in.spot_available >= wanted;
  v.on_spot = in.running_spot >= wanted;
  v.on_demand = in.running_on_demand > 0;
  return v;
}

// Waiting one more interval still leaves a changeover to start on-demand.
bool CanWait(const View& v) { return v.slack - v.interval >= v.d + kEps; }
// Starting spot now still leaves a changeover to start on-demand if it is preempted at once.
bool CanTrySpot(const View& v) { return v.slack >= 2 * v.d + kEps; }

DeadlineDecision Make(const DeadlineInput& in, Mode mode, std::string reason);

// A fixed reason: copied only when wanted.
DeadlineDecision Make(const DeadlineInput& in, Mode mode, const char* reason) {
  return Make(in, mode, in.explain ? std::string(reason) : std::string());
}

DeadlineDecision Make(const DeadlineInput& in, Mode mode, std::string reason) {
  DeadlineDecision d;
  const int wanted = std::max(1, in.wanted);
  const int avail = in.spot_available < 0 ? wanted : std::min(in.spot_available, wanted);
  switch (mode) {
    case Mode::kSpot:
      d.spot = wanted;
      break;
    case Mode::kOnDemand:
      // Keep the spot instances that still run; on-demand for the rest.
      d.spot = std::min(in.running_spot, avail);
      d.on_demand = wanted - d.spot;
      break;
    case Mode::kIdle:
      break;
  }
  if (in.work_left_s <= 0) d.spot = d.on_demand = 0;
  d.reason = std::move(reason);
  return d;
}

// "2.10 h"; a supply with no history behind it is unbounded, not 2.7e302 h.
std::string Hours(double s) {
  if (!(std::abs(s) < 1e12)) return "unbounded (no availability history yet)";
  // In the unit that fits: a job of minutes has its slack in seconds, not "0.00 h".
  const double a = std::abs(s);
  if (a < 120) return absl::StrFormat("%.0f s", s);
  if (a < 2 * 3600) return absl::StrFormat("%.1f min", s / 60);
  return absl::StrFormat("%.2f h", s / 3600);
}

// The reason, formatted only when the caller wants one (the simulator does not: formatting would
// cost more than the decision).
template <typename F>
std::string Why(const DeadlineInput& in, F reason) {
  return in.explain ? reason() : std::string();
}

// On-demand costs no more than spot (a catalog may list spot above on-demand, as AWS's p2.xlarge
// was in 2023): on-demand is never preempted and needs no second changeover, so spot can only
// lose. Prices of 0 and 0 are unknown, not equal.
bool OnDemandNoDearer(const DeadlineInput& in) {
  return in.spot_price_per_hour > 0 && in.on_demand_price_per_hour <= in.spot_price_per_hour;
}

// The decision for that case, with its reason.
DeadlineDecision OnDemandCheaper(const DeadlineInput& in) {
  return Make(in, Mode::kOnDemand, Why(in, [&] {
                return absl::StrFormat(
                    "on-demand ($%.4f/h) is no dearer than spot ($%.4f/h): on-demand, never "
                    "preempted",
                    in.on_demand_price_per_hour, in.spot_price_per_hour);
              }));
}

class OnDemandPolicy final : public DeadlinePolicy {
 public:
  DeadlineDecision Decide(const DeadlineInput& in) override {
    return Make(in, Mode::kOnDemand, "on-demand only");
  }
  absl::string_view name() const override { return "on-demand"; }
};

// `--fallback none`: spot when there is capacity, nothing otherwise (today's behaviour without a
// fallback; it may miss the deadline).
class SpotOnlyPolicy final : public DeadlinePolicy {
 public:
  DeadlineDecision Decide(const DeadlineInput& in) override {
    return See(in).spot_up ? Make(in, Mode::kSpot, "spot is there")
                           : Make(in, Mode::kIdle, "no spot; no fallback");
  }
  absl::string_view name() const override { return "spot-only"; }
};

// Spot whenever it is there, wait when it is not, and on-demand to the end once the slack is down
// to the safety margin.
class GreedyPolicy final : public DeadlinePolicy {
 public:
  DeadlineDecision Decide(const DeadlineInput& in) override {
    if (OnDemandNoDearer(in)) return OnDemandCheaper(in);
    const View v = See(in);
    if (committed_ || v.on_demand) {
      committed_ = true;
      return Make(in, Mode::kOnDemand, "committed to on-demand");
    }
    if (v.spot_up && (v.on_spot || CanTrySpot(v))) return Make(in, Mode::kSpot, "spot is there");
    if (CanWait(v)) return Make(in, Mode::kIdle, "no spot; waiting");
    committed_ = true;
    return Make(in, Mode::kOnDemand, Why(in, [&] {
                  return absl::StrCat("slack ", Hours(v.slack),
                                      " down to a changeover: on-demand to the end");
                }));
  }
  absl::string_view name() const override { return "greedy"; }
  bool plain_zone_choice() const override { return true; }

 private:
  bool committed_ = false;
};

// Uniform Progress (Wu et al., "Can't Be Late", NSDI'24), its four rules as the paper states them:
// expected progress ep(t) = W t / D, current progress cp(t).
//  1. Idle and cp(t) < ep(t): on-demand, to catch up.
//  2. Spot whenever it is available; stay on it until preempted.
//  3. Hysteresis: on on-demand, stay on it until cp(t) >= ep(t + 2d).
//  4. Safety net: idle and time left < work left + 2d: on-demand until the end.
class UniformProgressPolicy final : public DeadlinePolicy {
 public:
  DeadlineDecision Decide(const DeadlineInput& in) override {
    if (OnDemandNoDearer(in)) return OnDemandCheaper(in);
    const View v = See(in);
    const double total = in.now_s + in.time_left_s;  // D
    if (total_work_ <= 0) total_work_ = v.work;      // W: the first call sees all of it
    const double cp = total_work_ - v.work;
    auto ep = [&](double t) { return total > 0 ? total_work_ * t / total : total_work_; };
    const bool idle = !(v.on_spot && v.spot_up) && !v.on_demand;
    if (!safety_net_ && idle && v.left < v.work + 2 * v.d) safety_net_ = true;
    if (safety_net_) return Make(in, Mode::kOnDemand, "safety net: on-demand to the end");
    if (v.on_demand && cp < ep(in.now_s + 2 * v.d)) {
      return Make(in, Mode::kOnDemand, "hysteresis: behind ep(t + 2d)");
    }
    if (v.spot_up) return Make(in, Mode::kSpot, "spot is there");
    if (cp < ep(in.now_s)) return Make(in, Mode::kOnDemand, "behind uniform progress");
    return Make(in, Mode::kIdle, "ahead of uniform progress; waiting for spot");
  }
  absl::string_view name() const override { return "uniform-progress"; }

 private:
  double total_work_ = 0;
  bool safety_net_ = false;
};

// Ours. Greedy's weakness is its last move: it waits until the slack is down to one changeover,
// then runs on-demand to the end, so when spot comes back during that stretch (often, after a
// long outage) it cannot use it: a return to spot costs a changeover, and a second one to get back
// on on-demand if spot goes again. Ours waits through outages too, but only down to a reserve of
// `reserve_changeovers` changeovers beyond the one on-demand's start costs; then it runs
// on-demand (where the slack no longer shrinks), and whenever spot returns it goes back to it while
// two changeovers of slack remain and the expected spot run saves more than the round trip costs.
// The reserve buys several such returns for a few hours of on-demand bought earlier in the worst
// outages; it is kept only when such a return pays over the mean up period seen (where spot comes
// in short bursts, waiting down to greedy's floor uses more of it). On synthetic long-outage traces
// (bench/deadline_bench --tune) 6-10 changeovers all come within 4% of the omniscient optimum
// (greedy: 12%). Optional rules (off by default, kept for tuning): buy on-demand early when the
// work left exceeds the spot the rest of the window is expected to give (`supply_factor`, with the
// outage's expected rest: `outage_residual`).
class OursPolicy final : public DeadlinePolicy {
 public:
  explicit OursPolicy(const OursOptions& o) : o_(o) {}

  void SetHistory(const AvailabilityStats& h) override {
    history_ = h;
    outages_ = h.down_lengths_s;
    std::sort(outages_.begin(), outages_.end());
    // Suffix sums for the mean residual of the outages longer than an age.
    suffix_.assign(outages_.size() + 1, 0);
    for (size_t i = outages_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + outages_[i];
  }

  DeadlineDecision Decide(const DeadlineInput& in) override {
    Observe(in);
    const View v = See(in);
    if (!have_first_slack_) {
      first_slack_ = std::max(0.0, v.slack);
      have_first_slack_ = true;
    }
    if (v.work <= 0) return Make(in, Mode::kIdle, "done");
    if (OnDemandNoDearer(in)) return OnDemandCheaper(in);
    const double rate = UsableRate();
    double horizon = v.left;
    if (!v.spot_up && o_.outage_residual) horizon = std::max(0.0, v.left - ResidualOutage());
    const double supply = o_.supply_factor > 0 ? o_.supply_factor * rate * horizon : kHuge;
    if (v.spot_up) {
      if (v.on_spot) return Make(in, Mode::kSpot, "spot is there");
      if (!CanTrySpot(v)) {
        return Make(in, Mode::kOnDemand, Why(in, [&] {
                      return absl::StrCat("slack ", Hours(v.slack), " < 2 changeovers: on-demand");
                    }));
      }
      if (!v.on_demand) return Make(in, Mode::kSpot, "spot is back");
      // From on-demand, for an expected spot run of U (the mean up period): spot costs U at the
      // spot price for U - d of progress, and when spot goes, on-demand's restart costs d more
      // and the job is d more behind, bought on on-demand at the end: worth it when
      // U (p_od - p_spot) > 2 d p_od. When spot can finish the rest R <= U: R p_od > (R + d)
      // p_spot.
      const double run = MeanUp();
      const double p_od = in.on_demand_price_per_hour, p_spot = in.spot_price_per_hour;
      const double saving = v.work <= run ? v.work * p_od - (v.work + v.d) * p_spot
                                          : run * (p_od - p_spot) - 2 * v.d * p_od;
      if (saving > 0 && v.slack >= 2 * v.d + o_.back_to_spot_margin_s + kEps) {
        return Make(in, Mode::kSpot, "spot is back; worth leaving on-demand");
      }
      return Make(in, Mode::kOnDemand, "spot is back but the rest is too short to switch");
    }
    double reserve =
        std::min(o_.max_reserve_s, o_.reserve_changeovers * v.d + o_.reserve_s +
                                       o_.reserve_per_preemption * 2 * v.d * v.work / MeanUp());
    if (o_.max_reserve_fraction > 0) {
      reserve = std::min(reserve, o_.max_reserve_fraction * first_slack_);
    }
    if (o_.reserve_only_if_returns_pay &&
        !(MeanUp() * (in.on_demand_price_per_hour - in.spot_price_per_hour) >
          2 * v.d * in.on_demand_price_per_hour)) {
      reserve = 0;
    }
    if (!(v.slack - v.interval >= v.d + reserve + kEps)) {
      return Make(
          in, Mode::kOnDemand, Why(in, [&] {
            return absl::StrCat(
                "spot gone; slack ", Hours(v.slack), " down to a changeover",
                reserve > 0 ? absl::StrCat(" and the reserve ", Hours(reserve)) : std::string());
          }));
    }
    if (v.on_demand) {
      if (v.work > supply - o_.stop_hysteresis_s) {
        return Make(in, Mode::kOnDemand, Why(in, [&] {
                      return absl::StrCat("spot gone; work ", Hours(v.work), " > expected spot ",
                                          Hours(supply));
                    }));
      }
      return Make(in, Mode::kIdle, "ahead of the expected spot supply; waiting for spot");
    }
    if (v.work > supply) {
      return Make(in, Mode::kOnDemand, Why(in, [&] {
                    return absl::StrCat("spot gone; work ", Hours(v.work), " > expected spot ",
                                        Hours(supply));
                  }));
    }
    return Make(in, Mode::kIdle, Why(in, [&] {
                  return absl::StrCat("spot gone; waiting (expected spot ", Hours(supply), ")");
                }));
  }
  absl::string_view name() const override { return "ours"; }

 private:
  // The expected rest of the current outage: the mean of (length - age) over the outages seen
  // longer than its age; with none that long, its age again (a heavy tail's rule of thumb).
  double ResidualOutage() const {
    const double age = down_age_;
    const size_t i = std::upper_bound(outages_.begin(), outages_.end(), age) - outages_.begin();
    const size_t n = outages_.size() - i;
    if (n == 0) return age;
    return suffix_[i] / static_cast<double>(n) - age;
  }

  // Accounts the interval since the last call with the availability seen then.
  void Observe(const DeadlineInput& in) {
    const bool up = in.spot_available < 0 || in.spot_available >= std::max(1, in.wanted);
    if (!seen_) down_age_ = history_.trailing_down_s;
    if (seen_) {
      const double dt = std::max(0.0, in.now_s - last_now_);
      observed_ += dt;
      if (!last_up_) down_age_ += dt;
      if (last_up_) {
        available_ += dt;
        run_ += dt;
      }
      if (last_up_ && !up) {
        usable_ += std::max(0.0, run_ - in.changeover_s);
        ++up_periods_;
        run_ = 0;
      }
    }
    if (up) down_age_ = 0;
    seen_ = true;
    last_up_ = up;
    last_now_ = in.now_s;
    changeover_ = std::max(0.0, in.changeover_s);
  }
  double UsableRate() const {
    const double usable = history_.usable_s + usable_ + std::max(0.0, run_ - changeover_) +
                          o_.prior_rate * o_.prior_weight_s;
    const double observed = history_.observed_s + observed_ + o_.prior_weight_s;
    return observed > 0 ? usable / observed : o_.prior_rate;
  }
  // The mean up period (history and this job), with one prior period of 2 h.
  double MeanUp() const {
    const double up = history_.available_s + available_ + 2 * 3600;
    const double n = history_.up_periods + up_periods_ + (run_ > 0 ? 1 : 0) + 1;
    return up / n;
  }

  OursOptions o_;
  AvailabilityStats history_;
  std::vector<double> outages_, suffix_;
  double down_age_ = 0;
  double first_slack_ = 0;
  bool have_first_slack_ = false;
  bool seen_ = false, last_up_ = false;
  double last_now_ = 0, observed_ = 0, available_ = 0, usable_ = 0, run_ = 0, changeover_ = 0;
  int up_periods_ = 0;
};

}  // namespace

std::unique_ptr<DeadlinePolicy> MakeOursPolicy(const OursOptions& options) {
  return std::make_unique<OursPolicy>(options);
}

absl::StatusOr<std::unique_ptr<DeadlinePolicy>> MakeDeadlinePolicy(absl::string_view name) {
  if (name == "ours") return MakeOursPolicy(OursOptions{});
  if (name == "uniform-progress") return std::make_unique<UniformProgressPolicy>();
  if (name == "greedy") return std::make_unique<GreedyPolicy>();
  if (name == "on-demand") return std::make_unique<OnDemandPolicy>();
  if (name == "spot-only") return std::make_unique<SpotOnlyPolicy>();
  return absl::InvalidArgumentError(absl::StrCat(
      "policy = \"", name, "\": unknown (known: ",
      absl::StrJoin(std::begin(kDeadlinePolicyNames), std::end(kDeadlinePolicyNames), ", "), ")"));
}

}  // namespace spotdnn::provisioner::deadline
