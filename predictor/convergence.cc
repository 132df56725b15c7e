#include "predictor/convergence.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spotdnn::predictor {
namespace {

constexpr double kPi = 3.14159265358979323846;
// Largest global step a schedule or a horizon may name.
constexpr double kMaxSteps = 1e15;

bool Finite(double x) { return std::isfinite(x); }

absl::Status Bad(absl::string_view field, double value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat("%s = %g: %s", field, value, why));
}

absl::StatusOr<double> ParseNumber(absl::string_view part, absl::string_view text) {
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &v) || !Finite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr_schedule \"", part, "\": \"", text, "\" is not a number"));
  }
  return v;
}

// The base curve's error at step j (after warm-up) for N workers.
double BaseError(const ConvergenceModel& m, int workers, double r, double j) {
  const double n = std::max(1, workers);
  if (m.form == ConvergenceModel::Form::kEq3) {
    const double x = m.g3 * std::sqrt(std::max(0.0, (r + m.g4) * n)) / (j + m.g1);
    return x + m.g5;
  }
  return m.floor * std::pow(n, m.floor_exp) +
         m.amplitude * std::exp(-std::pow(j / (m.scale * std::pow(n, m.scale_exp)), m.shape));
}

// The schedule's factor m(j) on the base error.
// rho of a drop (or the cosine's) for `workers` workers.
double RatioFor(double rho, double exponent, int workers) {
  if (exponent == 0 || workers <= 1) return rho;
  const double logit = std::log(rho / std::max(1e-12, 1 - rho)) + exponent * std::log(workers);
  return 1 / (1 + std::exp(-logit));
}

double RateFactor(const ConvergenceModel& m, int workers, double j) {
  const LrSchedule& s = m.schedule;
  const double tau = std::max(1e-9, m.drop_time_steps);
  switch (s.kind) {
    case LrSchedule::Kind::kConstant:
      return 1;
    case LrSchedule::Kind::kStepDecay: {
      double f = 1;
      for (size_t i = 0; i < s.drop_steps.size(); ++i) {
        if (j <= s.drop_steps[i]) break;
        const double rho =
            RatioFor(i < m.drop_ratios.size() ? m.drop_ratios[i] : 1.0, m.drop_ratio_exp, workers);
        f *= rho + (1 - rho) * std::exp(-(j - s.drop_steps[i]) / tau);
      }
      return f;
    }
    case LrSchedule::Kind::kCosine: {
      const double lagged = std::max(0.0, j - std::max(0.0, m.drop_time_steps));
      const double rho = RatioFor(m.rho, m.drop_ratio_exp, workers);
      return rho + (1 - rho) * s.RateAt(lagged);
    }
  }
  return 1;
}

double NoiseAt(const ConvergenceModel& m, int workers, double j) {
  const double n = std::max(1, workers);
  const bool after =
      (m.schedule.kind == LrSchedule::Kind::kStepDecay && !m.schedule.drop_steps.empty() &&
       j > m.schedule.drop_steps.front()) ||
      (m.schedule.kind == LrSchedule::Kind::kCosine && j > m.schedule.cosine_horizon_steps / 2);
  if (after && m.noise_sd_after > 0) return m.noise_sd_after * std::pow(n, m.noise_exp_after);
  return m.noise_sd * std::pow(n, m.noise_exp);
}

double MeanError(const ConvergenceModel& m, int workers, double r, double step) {
  const double j = std::max(0.0, step - m.schedule.warmup_steps / 2);
  return BaseError(m, workers, r, j) * RateFactor(m, workers, step);
}

}  // namespace

double LrSchedule::RateAt(double step) const {
  if (warmup_steps > 0 && step < warmup_steps) return std::max(0.0, step / warmup_steps);
  switch (kind) {
    case Kind::kConstant:
      return 1;
    case Kind::kStepDecay: {
      double r = 1;
      for (size_t i = 0; i < drop_steps.size() && step > drop_steps[i]; ++i) {
        r *= i < drop_factors.size() ? drop_factors[i] : 0.1;
      }
      return r;
    }
    case Kind::kCosine:
      if (cosine_horizon_steps <= 0 || step >= cosine_horizon_steps) return 0;
      return 0.5 * (1 + std::cos(kPi * step / cosine_horizon_steps));
  }
  return 1;
}

absl::Status LrSchedule::Validate() const {
  if (!(Finite(warmup_steps) && warmup_steps >= 0 && warmup_steps <= kMaxSteps)) {
    return Bad("lr_schedule.warmup_steps", warmup_steps, "must be a number in [0, 1e15]");
  }
  if (kind == Kind::kStepDecay) {
    if (drop_steps.empty()) {
      return absl::InvalidArgumentError("lr_schedule: step decay needs at least one drop step");
    }
    if (static_cast<int>(drop_steps.size()) > kMaxScheduleDrops) {
      return absl::InvalidArgumentError(absl::StrFormat("lr_schedule: %d drops; at most %d",
                                                        drop_steps.size(), kMaxScheduleDrops));
    }
    if (!drop_factors.empty() && drop_factors.size() != drop_steps.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("lr_schedule: %d drop factors for %d drop steps", drop_factors.size(),
                          drop_steps.size()));
    }
    for (size_t i = 0; i < drop_steps.size(); ++i) {
      const double s = drop_steps[i];
      if (!(Finite(s) && s > 0 && s <= kMaxSteps)) {
        return Bad(absl::StrCat("lr_schedule.drop_steps[", i, "]"), s,
                   "must be a global step in (0, 1e15]");
      }
      if (i > 0 && !(s > drop_steps[i - 1])) {
        return Bad(absl::StrCat("lr_schedule.drop_steps[", i, "]"), s,
                   absl::StrFormat("must be after the drop before it (%g)", drop_steps[i - 1]));
      }
    }
    for (size_t i = 0; i < drop_factors.size(); ++i) {
      const double f = drop_factors[i];
      if (!(Finite(f) && f > 0 && f <= 1)) {
        return Bad(absl::StrCat("lr_schedule.drop_factors[", i, "]"), f, "must be in (0, 1]");
      }
    }
  } else if (!drop_steps.empty() || !drop_factors.empty()) {
    return absl::InvalidArgumentError("lr_schedule: drop steps belong to a step-decay schedule");
  }
  if (kind == Kind::kCosine && !(Finite(cosine_horizon_steps) && cosine_horizon_steps > 0 &&
                                 cosine_horizon_steps <= kMaxSteps)) {
    return Bad("lr_schedule.cosine_horizon_steps", cosine_horizon_steps,
               "must be a global step in (0, 1e15]");
  }
  return absl::OkStatus();
}

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view text) {
  LrSchedule s;
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&rest, "warmup:")) {
    const size_t plus = rest.find('+');
    auto w = ParseNumber("warmup", rest.substr(0, plus));
    if (!w.ok()) return w.status();
    s.warmup_steps = *w;
    rest = plus == absl::string_view::npos ? absl::string_view("constant") : rest.substr(plus + 1);
  }
  if (rest == "constant") {
    s.kind = LrSchedule::Kind::kConstant;
  } else if (absl::ConsumePrefix(&rest, "cosine:")) {
    s.kind = LrSchedule::Kind::kCosine;
    auto h = ParseNumber("cosine", rest);
    if (!h.ok()) return h.status();
    s.cosine_horizon_steps = *h;
  } else if (absl::ConsumePrefix(&rest, "step:")) {
    s.kind = LrSchedule::Kind::kStepDecay;
    for (absl::string_view drop : absl::StrSplit(rest, ',')) {
      std::vector<absl::string_view> p = absl::StrSplit(drop, absl::MaxSplits('*', 1));
      auto at = ParseNumber("step", p[0]);
      if (!at.ok()) return at.status();
      double factor = 0.1;
      if (p.size() == 2) {
        auto f = ParseNumber("step", p[1]);
        if (!f.ok()) return f.status();
        factor = *f;
      }
      s.drop_steps.push_back(*at);
      s.drop_factors.push_back(factor);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "lr_schedule = \"", text,
        "\": expected constant, step:STEP[*FACTOR],..., or cosine:HORIZON, optionally after "
        "warmup:STEPS+"));
  }
  if (auto st = s.Validate(); !st.ok()) return st;
  return s;
}

std::string LrScheduleText(const LrSchedule& s) {
  std::string out = s.warmup_steps > 0 ? absl::StrFormat("warmup:%.15g+", s.warmup_steps) : "";
  switch (s.kind) {
    case LrSchedule::Kind::kConstant:
      return s.warmup_steps > 0 ? absl::StrFormat("warmup:%.15g", s.warmup_steps) : "constant";
    case LrSchedule::Kind::kCosine:
      return absl::StrCat(out, absl::StrFormat("cosine:%.15g", s.cosine_horizon_steps));
    case LrSchedule::Kind::kStepDecay: {
      std::vector<std::string> drops;
      for (size_t i = 0; i < s.drop_steps.size(); ++i) {
        drops.push_back(absl::StrFormat("%.15g*%.15g", s.drop_steps[i],
                                        i < s.drop_factors.size() ? s.drop_factors[i] : 0.1));
      }
      return absl::StrCat(out, "step:", absl::StrJoin(drops, ","));
    }
  }
  return out;
}

absl::Status ConvergenceModel::Validate() const {
  if (metric.empty() || metric.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("convergence.metric = \"", metric, "\": must be 1 to 128 characters"));
  }
  const std::string w = absl::StrCat("convergence[", metric, "].");
  auto finite = [&](absl::string_view f, double v) -> absl::Status {
    if (Finite(v)) return absl::OkStatus();
    return Bad(absl::StrCat(w, f), v, "must be a finite number");
  };
  auto nonneg = [&](absl::string_view f, double v) -> absl::Status {
    if (Finite(v) && v >= 0) return absl::OkStatus();
    return Bad(absl::StrCat(w, f), v, "must be a finite number >= 0");
  };
  for (auto st :
       {finite("ceiling", ceiling), nonneg("floor", floor), finite("floor_exp", floor_exp),
        nonneg("amplitude", amplitude), finite("scale_exp", scale_exp), finite("g1", g1),
        finite("g3", g3), finite("g4", g4), finite("g5", g5),
        nonneg("drop_time_steps", drop_time_steps), finite("drop_ratio_exp", drop_ratio_exp),
        nonneg("noise_sd", noise_sd), finite("noise_exp", noise_exp),
        nonneg("noise_sd_after", noise_sd_after), finite("noise_exp_after", noise_exp_after),
        nonneg("eval_interval_steps", eval_interval_steps),
        finite("eval_interval_per_worker_steps", eval_interval_per_worker_steps)}) {
    if (!st.ok()) return st;
  }
  if (form == Form::kSaturating && !(Finite(scale) && scale > 0)) {
    return Bad(absl::StrCat(w, "scale"), scale, "must be a finite number > 0");
  }
  if (form == Form::kSaturating && !(Finite(shape) && shape > 0 && shape <= 10)) {
    return Bad(absl::StrCat(w, "shape"), shape, "must be in (0, 10]");
  }
  if (!(Finite(noise_run_share) && noise_run_share >= 0 && noise_run_share <= 0.99)) {
    return Bad(absl::StrCat(w, "noise_run_share"), noise_run_share, "must be in [0, 0.99]");
  }
  if (!(Finite(rho) && rho > 0 && rho <= 1)) {
    return Bad(absl::StrCat(w, "rho"), rho, "must be in (0, 1]");
  }
  if (best_value && !Finite(*best_value)) {
    return Bad(absl::StrCat(w, "best_value"), *best_value, "must be a finite number");
  }
  if (auto st = ValidateBatchLaw(w); !st.ok()) return st;
  if (auto st = schedule.Validate(); !st.ok()) return st;
  if (schedule.kind == LrSchedule::Kind::kStepDecay &&
      drop_ratios.size() != schedule.drop_steps.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sdrop_ratios: %d for %d drop steps", w, drop_ratios.size(), schedule.drop_steps.size()));
  }
  for (size_t i = 0; i < drop_ratios.size(); ++i) {
    if (!(Finite(drop_ratios[i]) && drop_ratios[i] > 0 && drop_ratios[i] <= 1)) {
      return Bad(absl::StrCat(w, "drop_ratios[", i, "]"), drop_ratios[i], "must be in (0, 1]");
    }
  }
  return absl::OkStatus();
}

absl::Status ConvergenceModel::ValidateBatchLaw(absl::string_view where) const {
  // The most samples one step may hold (predictor/types.h's kMaxGlobalBatch, 2^30).
  constexpr double kMostSamplesPerStep = 1 << 30;
  if (!(Finite(reference_global_batch) && reference_global_batch >= 0 &&
        reference_global_batch <= kMostSamplesPerStep)) {
    return Bad(absl::StrCat(where, "reference_global_batch"), reference_global_batch,
               "must be in [0, 1073741824] (samples per step; 0 = not known)");
  }
  if (!critical_batch) return absl::OkStatus();
  if (!(Finite(*critical_batch) && *critical_batch >= 0)) {
    return Bad(absl::StrCat(where, "critical_batch"), *critical_batch,
               "must be a finite number of samples >= 0");
  }
  if (reference_global_batch == 0) {
    return Bad(absl::StrCat(where, "critical_batch"), *critical_batch,
               "needs the global batch the curve describes (reference_global_batch)");
  }
  return absl::OkStatus();
}

bool ConvergenceModel::IsExtrapolation(double target) const {
  if (!best_value) return false;
  const double best_error = ErrorOf(*best_value);
  return ErrorOf(target) < best_error - 0.02 * std::abs(best_error);
}

std::string DescribeConvergence(const ConvergenceModel& m) {
  std::string out =
      m.form == ConvergenceModel::Form::kEq3
          ? absl::StrFormat("error = %.4g sqrt((R + %.3g) N) / (j + %.4g) + %.4g", m.g3, m.g4, m.g1,
                            m.g5)
          : absl::StrFormat("error = %.3g N^%.2f + %.3g exp(-(j / (%.4g N^%.2f))^%.2f)", m.floor,
                            m.floor_exp, m.amplitude, m.scale, m.scale_exp, m.shape);
  absl::StrAppend(&out, "; ", LrScheduleText(m.schedule));
  if (!m.drop_ratios.empty()) {
    std::vector<std::string> r;
    for (double d : m.drop_ratios) r.push_back(absl::StrFormat("%.2f", d));
    absl::StrAppend(&out, absl::StrFormat(" (settles to %s within %.0f steps",
                                          absl::StrJoin(r, ", "), m.drop_time_steps));
    if (m.drop_ratio_exp != 0) {
      absl::StrAppend(&out, absl::StrFormat(", logit + %.2f ln N", m.drop_ratio_exp));
    }
    absl::StrAppend(&out, ")");
  }
  absl::StrAppend(&out, absl::StrFormat("; spread %.3g N^%.2f", m.noise_sd, m.noise_exp));
  if (m.noise_sd_after > 0) {
    absl::StrAppend(&out, absl::StrFormat(" before the drop, %.3g N^%.2f after", m.noise_sd_after,
                                          m.noise_exp_after));
  }
  if (m.noise_run_share > 0) {
    absl::StrAppend(
        &out, absl::StrFormat(" (%.0f%% of its variance a run's own)", 100 * m.noise_run_share));
  }
  if (m.best_value) absl::StrAppend(&out, absl::StrFormat("; best seen %.4g", *m.best_value));
  if (m.eval_interval_steps > 0) {
    absl::StrAppend(&out, absl::StrFormat("; evaluated every %.0f steps", m.eval_interval_steps));
    if (m.eval_interval_per_worker_steps > 0) {
      absl::StrAppend(&out,
                      absl::StrFormat(" + %.2f per worker", m.eval_interval_per_worker_steps));
    }
  }
  return out;
}

double MeanValueAt(const ConvergenceModel& model, int workers, double r, double step) {
  return model.ValueOf(MeanError(model, workers, r, step));
}

namespace {

// Where the mean error curve first reaches `goal` (at or below it): s doubles from `start` until
// the curve is there at s, then 60 bisections of (s / 2, s] (of (`first_lo`, start] when it is
// there at `start` already). +infinity when s passes kMaxSteps, or passes `give_up_after`
// without reaching it.
double MeanCrossing(const ConvergenceModel& model, int workers, double r, double goal, double start,
                    double first_lo,
                    double give_up_after = std::numeric_limits<double>::infinity()) {
  auto reached = [&](double step) { return MeanError(model, workers, r, step) <= goal; };
  for (double s = start; s <= kMaxSteps; s *= 2) {
    if (reached(s)) {
      double lo = s == start ? first_lo : s / 2, hi = s;
      for (int i = 0; i < 60; ++i) {
        const double mid = (lo + hi) / 2;
        (reached(mid) ? hi : lo) = mid;
      }
      return hi;
    }
    if (s > give_up_after) break;
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace

double MeanStepAt(const ConvergenceModel& model, int workers, double r, double value) {
  const double goal = model.ErrorOf(value);
  if (!Finite(goal)) return std::numeric_limits<double>::infinity();
  return MeanCrossing(model, workers, r, goal, /*start=*/1, /*first_lo=*/0);
}

StepQuantiles StepsToTarget(const ConvergenceModel& model, int workers, double r, double target,
                            double from_step, int draws) {
  StepQuantiles out;
  const double goal = model.ErrorOf(target);  // reach an error at or below this
  if (!Finite(goal) || !Finite(from_step) || from_step < 0) return out;
  draws = std::clamp(draws, 1, 100'000);
  auto mean_at = [&](double s) { return MeanError(model, workers, r, s); };
  double end = std::max(1.0, from_step);
  const LrSchedule& sch = model.schedule;
  if (sch.kind == LrSchedule::Kind::kStepDecay) end = std::max(end, sch.drop_steps.back() * 2);
  if (sch.kind == LrSchedule::Kind::kCosine) end = std::max(end, sch.cosine_horizon_steps);
  const double start = std::max(1.0, from_step);
  const double mean_cross = MeanCrossing(model, workers, r, goal, start, /*first_lo=*/start / 2,
                                         /*give_up_after=*/std::max(4 * end, 1e9));
  const double horizon =
      std::min(kMaxSteps, std::max(end, Finite(mean_cross) ? 20 * mean_cross : 20 * end));
  // Evaluations: every eval_interval_steps from the start (a running job: from from_step), at
  // most 4,096 of them; without an interval, 512 points spread up to the horizon.
  double interval =
      model.eval_interval_steps > 0
          ? model.eval_interval_steps + model.eval_interval_per_worker_steps * std::max(1, workers)
          : 0;
  const double span = horizon - from_step;
  if (!(interval > 0) || span / interval > 4096) interval = span / 512;
  if (!(interval > 0)) return out;
  const double first =
      model.eval_interval_steps > 0 && from_step == 0 ? interval : from_step + interval;
  std::vector<double> steps, means, sds;
  for (double s = first; s <= horizon + 1e-9; s += interval) {
    steps.push_back(s);
    means.push_back(mean_at(s));
    sds.push_back(NoiseAt(model, workers, s));
  }
  if (steps.empty()) return out;
  // A deterministic stream: the same model and question give the same answer.
  std::mt19937_64 rng(0x5eed5eedULL ^ static_cast<uint64_t>(workers));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> hits;
  hits.reserve(draws);
  // The curve starts at its mean (a running job: where the mean curve is at from_step).
  const double start_error = mean_at(from_step);
  // Each run's own offset (in units of the noise's sd) is drawn once; each evaluation adds its
  // own draw, so that the two together have the noise's sd.
  const double run_part = std::sqrt(std::clamp(model.noise_run_share, 0.0, 0.99));
  const double eval_part = std::sqrt(1 - run_part * run_part);
  for (int d = 0; d < draws; ++d) {
    double prev_step = from_step, prev_err = start_error;
    double hit = std::numeric_limits<double>::infinity();
    const double offset = run_part > 0 ? run_part * normal(rng) : 0.0;
    for (size_t k = 0; k < steps.size(); ++k) {
      const double e = means[k] + sds[k] * (offset + eval_part * normal(rng));
      if (e <= goal) {
        if (Finite(prev_err) && prev_err > goal) {
          hit = prev_step + (prev_err - goal) / (prev_err - e) * (steps[k] - prev_step);
        } else {
          hit = steps[k];
        }
        break;
      }
      prev_step = steps[k];
      prev_err = e;
    }
    hits.push_back(hit - from_step);
  }
  std::sort(hits.begin(), hits.end());
  auto q = [&](double p) { return hits[static_cast<size_t>(p * (hits.size() - 1) + 0.5)]; };
  out.reached_fraction =
      static_cast<double>(std::count_if(hits.begin(), hits.end(), Finite)) / hits.size();
  out.p10 = q(0.1);
  out.p50 = q(0.5);
  out.p90 = q(0.9);
  out.reachable = Finite(out.p50);
  return out;
}

}  // namespace spotdnn::predictor
