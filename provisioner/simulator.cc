#include "provisioner/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "predictor/allreduce.h"
#include "provisioner/stop_poll.h"

namespace spotdnn::provisioner {
namespace {

// Most revocations one run may see before it is stopped as unfinished (a lifetime distribution
// that revokes at launch would otherwise never let a run end).
constexpr int kMaxRevocationsPerRun = 100'000;
// Most re-plans kept in the cache; it starts over when full.
constexpr size_t kMaxCachedReplans = 1'000'000;
// Most search memos kept (one per set of survivors); they start over when there are more.
constexpr size_t kMaxSearchMemos = 4096;

// One instance in a run.
struct Instance {
  int type = 0;
  double launch = 0;  // launched (paid from here)
  double ready = 0;   // trains from here
  double notice = 0;  // its revocation notice (the re-plan)
  double death = 0;   // revoked
  bool revoking = false;
  bool dead = false;
  bool joined = true;  // a synchronous job's rank (a replacement joins at a restart when ready)
};

int64_t Bits(double x) {
  int64_t out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * n));
    return values[std::clamp<size_t>(i, 1, n) - 1];
  };
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.stddev = n > 1 ? std::sqrt(squares / (n - 1)) : 0;
  s.p50 = rank(0.5);
  s.p90 = rank(0.9);
  s.min = values.front();
  s.max = values.back();
  return s;
}

}  // namespace

double ExpectedRestartCostS(const SynchronousRestart& restart) {
  return restart.restart_s + restart.checkpoint_every_s / 2;
}

void WilsonInterval(int k, int n, double* low, double* high) {
  if (n <= 0) {
    *low = 0;
    *high = 1;
    return;
  }
  constexpr double z = 1.959963984540054;
  const double p = static_cast<double>(k) / n;
  const double denom = 1 + z * z / n;
  const double centre = (p + z * z / (2.0 * n)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4.0 * n * n)) / denom;
  *low = k == 0 ? 0.0 : std::max(0.0, centre - half);
  *high = k == n ? 1.0 : std::min(1.0, centre + half);
}

absl::Status ValidateSimulationOptions(const SimulationOptions& o) {
  if (o.runs < 1 || o.runs > kMaxSimulationRuns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.runs = %d: must be in [1, %d]", o.runs, kMaxSimulationRuns));
  }
  if (!(std::isfinite(o.notice_s) && o.notice_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.notice_s = %g: must be a finite number >= 0", o.notice_s));
  }
  if (o.takeover_delay_s && !(std::isfinite(*o.takeover_delay_s) && *o.takeover_delay_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "simulation.takeover_delay_s = %g: must be a finite number >= 0", *o.takeover_delay_s));
  }
  if (!(std::isfinite(o.lost_iterations_per_revocation) && o.lost_iterations_per_revocation >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.lost_iterations_per_revocation = %g: must be a finite number "
                        ">= 0",
                        o.lost_iterations_per_revocation));
  }
  if (o.synchronous) {
    const SynchronousRestart& r = *o.synchronous;
    if (!(std::isfinite(r.restart_s) && r.restart_s >= 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "simulation.restart_s = %g: must be a finite number of seconds >= 0", r.restart_s));
    }
    if (!(std::isfinite(r.checkpoint_every_s) && r.checkpoint_every_s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("simulation.checkpoint_every_s = %g: must be a finite number of seconds "
                          "> 0",
                          r.checkpoint_every_s));
    }
    if (r.min_instances < 1 || r.min_instances > predictor::kMaxClusterSize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("simulation.min_instances = %d: must be in [1, %d]", r.min_instances,
                          predictor::kMaxClusterSize));
    }
    if (r.local_batch < 0 || r.local_batch > predictor::kMaxBatchPerGpu) {
      return absl::InvalidArgumentError(
          absl::StrFormat("simulation.local_batch = %d: must be in [0, %d] (0 = the plan's model)",
                          r.local_batch, predictor::kMaxBatchPerGpu));
    }
    if (r.global_batch < 0 || r.global_batch > predictor::kMaxGlobalBatch) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "simulation.global_batch = %d: must be in [0, %d] (0 = the profile's global_batch_size)",
          r.global_batch, predictor::kMaxGlobalBatch));
    }
  }
  if (!(o.replan_resolution >= 0 && o.replan_resolution <= 0.1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "simulation.replan_resolution = %g: must be in [0, 0.1] (0 = exact)", o.replan_resolution));
  }
  if (o.max_replan_solves < 1) {
    return absl::InvalidArgumentError("simulation.max_replan_solves = 0: must be at least 1");
  }
  if (!(o.horizon_factor >= 1 && o.horizon_factor <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.horizon_factor = %g: must be in [1, 1000]", o.horizon_factor));
  }
  return absl::OkStatus();
}

size_t Simulator::KeyHash::operator()(const Key& k) const {
  uint64_t h = MixSeed(static_cast<uint64_t>(k.clock)) ^
               (MixSeed(static_cast<uint64_t>(k.progress)) << 1) ^ static_cast<uint64_t>(k.step);
  for (int c : k.survivors) h = MixSeed(h ^ static_cast<uint64_t>(c));
  for (int c : k.before) h = MixSeed(h ^ (static_cast<uint64_t>(c) << 20));
  return static_cast<size_t>(h);
}

absl::StatusOr<std::unique_ptr<Simulator>> Simulator::Create(const PerformanceModel& model,
                                                             PlanProblem problem,
                                                             RevocationModel revocations,
                                                             SimulationOptions options) {
  auto adapter = std::make_unique<ParameterServerPlanModel>(model);
  const PlanModel& plan_model = *adapter;
  auto out = Create(plan_model, std::move(problem), std::move(revocations), std::move(options));
  if (out.ok()) (*out)->owned_ = std::move(adapter);
  return out;
}

absl::StatusOr<std::unique_ptr<Simulator>> Simulator::Create(const PlanModel& model,
                                                             PlanProblem problem,
                                                             RevocationModel revocations,
                                                             SimulationOptions options) {
  if (model.synchronous() && !options.synchronous) options.synchronous = SynchronousRestart{};
  if (auto s = ValidateSimulationOptions(options); !s.ok()) return s;
  if (auto s = model.Validate(problem); !s.ok()) return s;
  if (!std::isfinite(problem.deadline_s)) {
    return absl::InvalidArgumentError(
        "deadline_s: the simulator needs a deadline (the probability of meeting it is its point)");
  }
  if (std::isfinite(problem.current_loss)) {
    return absl::InvalidArgumentError(
        "current_loss: simulations start a job from scratch; leave it unset");
  }
  if (revocations.types.size() != model.catalog().types.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "revocation model has %d types; catalog \"%s\" has %d", revocations.types.size(),
        model.catalog().name, model.catalog().types.size()));
  }
  return std::unique_ptr<Simulator>(
      new Simulator(model, nullptr, std::move(problem), std::move(revocations), options));
}

const Simulator::Decision& Simulator::Replan(const std::vector<int>& survivors,
                                             const std::vector<int>& before, double elapsed_s,
                                             double iterations_done, double plan_iterations,
                                             double* clock_used, double* progress_used,
                                             bool* solved) {
  Key key{.survivors = survivors, .before = before};
  const double res = options_.replan_resolution;
  if (res > 0) {
    const double dt = res * problem_.deadline_s;
    const double dj = res * plan_iterations;
    key.clock = static_cast<int64_t>(std::ceil(elapsed_s / dt - 1e-9));
    key.progress = static_cast<int64_t>(std::floor(iterations_done / dj + 1e-9));
    key.step = Bits(dj);
    *clock_used = key.clock * dt;
    *progress_used = std::max(0.0, key.progress * dj);
  } else {
    key.clock = Bits(elapsed_s);
    key.progress = Bits(iterations_done);
    *clock_used = elapsed_s;
    *progress_used = iterations_done;
  }
  auto it = cache_.find(key);
  *solved = it == cache_.end();
  if (!*solved) return it->second;
  if (cache_.size() >= kMaxCachedReplans) cache_.clear();

  Decision d;
  PlanProblem p = problem_;
  p.min_counts = survivors;
  if (options_.reuse_search && options_.strategy == Strategy::kExact) {
    if (memos_.size() >= kMaxSearchMemos && memos_.count(survivors) == 0) memos_.clear();
    std::unique_ptr<SearchMemo>& memo = memos_[survivors];
    if (!memo) memo = std::make_unique<SearchMemo>();
    p.memo = memo.get();
  }
  JobProgress progress{
      .elapsed_s = *clock_used, .iterations_done = *progress_used, .cluster_before = before};
  ++solves_;
  auto r = model_.Replan(p, progress, options_.strategy, options_.exhaustive_limit,
                         /*find_fastest=*/false);
  if (!r.ok() && problem_.stop) {
    // A re-plan the stop check ended is no answer to cache: the whole simulation stops (Run).
    if (auto s = problem_.stop(); !s.ok()) {
      stopped_ = s;
      static const Decision kStopped{.error = true};
      return kStopped;
    }
  }
  if (!r.ok()) {
    d.error = true;
  } else if (r->feasible) {
    d.feasible = true;
    d.to_launch = r->to_launch;
    d.rest_iterations = r->plan.estimate.normalized_iterations;
  }
  return cache_.emplace(std::move(key), std::move(d)).first->second;
}

absl::StatusOr<SimulationResult> Simulator::Run(absl::Span<const int> plan) {
  return Run(plan, options_.runs, options_.seed);
}

absl::StatusOr<SimulationResult> Simulator::Run(absl::Span<const int> plan, int runs,
                                                uint64_t seed) {
  const auto& types = model_.catalog().types;
  const size_t n_types = types.size();
  if (runs < 1 || runs > kMaxSimulationRuns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.runs = %d: must be in [1, %d]", runs, kMaxSimulationRuns));
  }
  if (plan.size() != n_types) {
    return absl::InvalidArgumentError(
        absl::StrFormat("plan has %d counts; catalog \"%s\" has %d types", plan.size(),
                        model_.catalog().name, n_types));
  }
  for (size_t k = 0; k < n_types; ++k) {
    if (plan[k] < 0 || plan[k] > problem_.max_counts[k]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "plan count of %s = %d: must be in [0, its quota %d] (re-plans keep to the quotas)",
          types[k].name, plan[k], problem_.max_counts[k]));
    }
  }
  Candidate planned;
  if (!model_.Score(problem_, plan, planned)) {
    return model_.ScoreError(problem_, plan, planned);
  }
  const double plan_iterations = planned.estimate.normalized_iterations;
  // The convergence spread as a log-normal's sigma: ln(p90 / p10) = 2 z(0.9) sigma.
  double spread_sigma = 0;
  if (options_.convergence_spread && planned.estimate.has_spread &&
      planned.estimate.iterations_p10 > 0 && std::isfinite(planned.estimate.iterations_p90)) {
    spread_sigma = std::log(planned.estimate.iterations_p90 / planned.estimate.iterations_p10) /
                   (2 * 1.2815515655446004);
  }

  std::vector<double> price(n_types);
  for (size_t k = 0; k < n_types; ++k) {
    price[k] =
        (problem_.on_demand ? types[k].on_demand_price_per_hour : types[k].spot_price_per_hour) /
        3600;
  }
  const double ps_price = model_.FixedPricePerHour(problem_) / 3600;
  const double overhead = options_.takeover_delay_s.value_or(problem_.overhead_s);
  const double horizon = options_.horizon_factor * problem_.deadline_s;
  const double lost = options_.lost_iterations_per_revocation;
  const double deadline = problem_.deadline_s * (1 + 1e-12);

  SimulationResult result;
  result.runs = runs;
  result.seed = seed;
  result.plan_time_s = planned.time_s;
  result.plan_cost_usd = planned.cost_usd;
  std::vector<double> times(runs), costs(runs), revocation_counts(runs);
  int met_slo = 0, no_revocation = 0;

  std::vector<Instance> instances;
  std::vector<int> train(n_types), survivors(n_types), before(n_types);
  auto rate_of = [&](const std::vector<int>& counts) { return model_.Speed(problem_, counts); };
  // A synchronous job's speed on `counts` in the plan's normalized iterations per second: a
  // synchronous model's own; for a parameter-server model simulated as synchronous, the
  // all-reduce model's step time at the options' local batch (for an iterations or samples
  // target, the plan's iterations over the time the all-reduce model gives the target), else the
  // plan's model's.
  const std::optional<SynchronousRestart>& sync = options_.synchronous;
  const predictor::Target target_asked = problem_.target();
  const bool by_target = target_asked.kind == predictor::Target::Kind::kIterations ||
                         target_asked.kind == predictor::Target::Kind::kSamples;
  const PerformanceModel* ps_model = model_.parameter_server_model();
  const bool sync_model = sync && ps_model != nullptr &&
                          (sync->local_batch > 0 || sync->global_batch > 0 ||
                           ps_model->profile().global_batch_size > 0);
  auto sync_rate_of = [&](const std::vector<int>& counts) {
    if (sync_model) {
      const predictor::Cluster cluster{.counts = counts,
                                       .parameter_servers = problem_.parameter_servers};
      auto p = predictor::PredictAllReduce(
          ps_model->profile(), model_.catalog(), cluster,
          by_target ? target_asked : predictor::Target::Iterations(plan_iterations),
          sync->local_batch, sync->global_batch);
      if (p.ok() && p->estimate.time_s > 0) return plan_iterations / p->estimate.time_s;
    }
    return rate_of(counts);
  };
  if (sync_model) {
    const predictor::Cluster cluster{.counts = std::vector<int>(plan.begin(), plan.end()),
                                     .parameter_servers = problem_.parameter_servers};
    auto p = predictor::PredictAllReduce(
        ps_model->profile(), model_.catalog(), cluster,
        by_target ? target_asked : predictor::Target::Iterations(plan_iterations),
        sync->local_batch, sync->global_batch);
    if (!p.ok()) {
      return absl::Status(p.status().code(),
                          absl::StrCat("simulation.local_batch: ", p.status().message()));
    }
  }
  if (sync) {
    result.synchronous = true;
    result.restart = *sync;
  }
  std::vector<double> restart_counts(runs), redone_seconds(runs), redone_steps(runs);

  // The problem's stop check (a caller's deadline) is polled every few runs and after re-plans.
  StopPoll poll(problem_.stop, 16);
  stopped_ = absl::OkStatus();
  for (int run = 0; run < runs; ++run) {
    if (!poll.Tick()) return poll.status();
    if (!stopped_.ok()) return stopped_;
    Rng rng(MixSeed(seed) ^ MixSeed(static_cast<uint64_t>(run) + 0x5EED));
    instances.clear();
    auto launch = [&](int type, double at, double ready, bool joined = true) {
      const double life = revocations_.types[type].Quantile(rng.Uniform());
      Instance i;
      i.type = type;
      i.launch = at;
      i.ready = ready;
      i.death = at + life;
      i.notice = std::max(at, i.death - options_.notice_s);
      i.joined = joined;
      instances.push_back(i);
    };
    for (size_t k = 0; k < n_types; ++k) {
      for (int c = 0; c < plan[k]; ++c) launch(static_cast<int>(k), 0, 0);
    }
    // What this run's job needs: the plan's p50 scaled by its own convergence (a separate
    // stream, so that the lifetimes stay the same draws with and without the spread).
    double needed = plan_iterations;
    if (spread_sigma > 0) {
      Rng conv(MixSeed(seed ^ 0xC0FFEEULL) ^ MixSeed(static_cast<uint64_t>(run)));
      const double u1 = conv.Uniform(), u2 = conv.Uniform();
      const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * 3.14159265358979323846 * u2);
      needed = plan_iterations * std::exp(spread_sigma * z);
    }
    double t = 0, progress = 0, target = needed, cost = 0;
    int revocations = 0;
    bool finished = false;
    // A synchronous job: training paused until `paused_until` (a restart), the progress of its
    // last checkpoint and the training seconds since it, and what its restarts cost.
    double paused_until = 0, checkpoint = 0, since_checkpoint = 0;
    double restarts = 0, redone = 0, redone_progress = 0;
    auto restart = [&] {
      redone += since_checkpoint;
      redone_progress += progress - checkpoint;
      progress = checkpoint;
      since_checkpoint = 0;
      paused_until = t + sync->restart_s;
      ++restarts;
    };
    while (true) {
      std::fill(train.begin(), train.end(), 0);
      double next = std::numeric_limits<double>::infinity();
      int training = 0;
      for (const Instance& i : instances) {
        if (i.dead) continue;
        if (i.ready <= t && i.joined) {
          ++train[i.type];
          ++training;
        }
        if (!i.revoking) next = std::min(next, i.notice);
        next = std::min(next, i.death);
        if (i.ready > t) next = std::min(next, i.ready);
      }
      double rate = 0;
      if (!sync) {
        rate = rate_of(train);
      } else if (paused_until > t) {
        next = std::min(next, paused_until);
      } else if (training >= sync->min_instances) {
        rate = sync_rate_of(train);
        // The next checkpoint is an event: a restart after it redoes only what follows it.
        if (rate > 0) next = std::min(next, t + (sync->checkpoint_every_s - since_checkpoint));
      }
      const double finish = progress >= target ? t
                            : rate > 0         ? t + (target - progress) / rate
                                               : std::numeric_limits<double>::infinity();
      if (finish <= next && finish <= horizon) {
        t = finish;
        finished = true;
        break;
      }
      if (next > horizon || revocations >= kMaxRevocationsPerRun) {
        if (horizon > t) t = horizon;
        break;
      }
      progress += rate * (next - t);
      if (sync && rate > 0) {
        since_checkpoint += next - t;
        if (since_checkpoint >= sync->checkpoint_every_s * (1 - 1e-9)) {
          checkpoint = progress;
          since_checkpoint = 0;
        }
      }
      t = next;
      if (sync) {
        // A replacement that is ready joins the job at a restart of every rank.
        for (Instance& i : instances) {
          if (!i.dead && !i.joined && i.ready <= t) {
            i.joined = true;
            restart();
          }
        }
      }
      // The gateway handles one event at a time, in order.
      for (size_t x = 0; x < instances.size(); ++x) {
        if (instances[x].dead) continue;
        if (!instances[x].revoking && instances[x].notice <= t) {
          instances[x].revoking = true;
          ++revocations;
          std::fill(survivors.begin(), survivors.end(), 0);
          std::fill(before.begin(), before.end(), 0);
          for (const Instance& i : instances) {
            if (i.dead) continue;
            ++before[i.type];
            if (!i.revoking) ++survivors[i.type];
          }
          double clock_used = 0, progress_used = 0;
          bool solved = false;
          const Decision& d = Replan(survivors, before, t, progress, plan_iterations, &clock_used,
                                     &progress_used, &solved);
          ++result.replans;
          result.replans_solved += solved;
          if (solves_ > options_.max_replan_solves) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "simulation.max_replan_solves = %d: the simulation needed more re-plans (%d "
                "revocations per run so far, %d runs done); simulate fewer runs, use a coarser "
                "simulation.replan_resolution, or check the lifetimes (they revoke very often)",
                options_.max_replan_solves, result.replans / std::max(1, run + 1), run));
          }
          if (d.error) {
            ++result.replan_errors;
          } else if (!d.feasible) {
            launch(instances[x].type, t, t + overhead, !sync);  // like for like
          } else {
            // The re-plan counts on the p50; the run still needs what it drew beyond it. A
            // synchronous job's steps do not depend on the cluster (a fixed global batch): its
            // target stays.
            if (!sync) target = progress_used + d.rest_iterations + (needed - plan_iterations);
            const std::vector<int> to_launch = d.to_launch;  // `d` may move as the cache grows
            for (size_t k = 0; k < n_types; ++k) {
              for (int c = 0; c < to_launch[k]; ++c) {
                launch(static_cast<int>(k), t, t + overhead, !sync);
              }
            }
          }
        }
        if (instances[x].death <= t) {
          instances[x].dead = true;
          cost += price[instances[x].type] * (instances[x].death - instances[x].launch);
          if (!sync) {
            progress = std::max(0.0, progress - lost);
          } else if (instances[x].joined) {
            restart();  // every rank stops and resumes from the last checkpoint on the survivors
          }
        }
      }
    }
    for (const Instance& i : instances) {
      if (!i.dead) cost += price[i.type] * (t - i.launch);
    }
    cost += ps_price * t;
    const bool met = finished && t <= deadline;
    times[run] = t;
    costs[run] = cost;
    revocation_counts[run] = revocations;
    restart_counts[run] = restarts;
    redone_seconds[run] = redone;
    redone_steps[run] = redone_progress;
    result.met_deadline += met;
    met_slo += met && cost <= problem_.budget_usd;
    no_revocation += revocations == 0;
    result.unfinished += !finished;
  }
  if (!stopped_.ok()) return stopped_;
  result.p_meet_deadline = static_cast<double>(result.met_deadline) / runs;
  WilsonInterval(result.met_deadline, runs, &result.p_meet_deadline_low,
                 &result.p_meet_deadline_high);
  result.p_meet_slo = static_cast<double>(met_slo) / runs;
  result.p_no_revocation = static_cast<double>(no_revocation) / runs;
  result.time_s = Summarize(std::move(times));
  result.cost_usd = Summarize(std::move(costs));
  result.revocations = Summarize(std::move(revocation_counts));
  if (sync) {
    result.restarts = Summarize(std::move(restart_counts));
    result.redone_s = Summarize(std::move(redone_seconds));
    result.redone_iterations = Summarize(std::move(redone_steps));
  }
  return result;
}

}  // namespace spotdnn::provisioner
