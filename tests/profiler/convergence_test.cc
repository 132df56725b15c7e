// The convergence model (predictor/convergence.h) and its fit (profiler/convergence_fit.h):
// schedules, step-drop detection, parameter recovery from noisy curves, accuracy and loss targets,
// and the ICAC 2019 runs.
#include "predictor/convergence.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "predictor/performance_model.h"
#include "profiler/convergence_fit.h"
#include "profiler/convergence_validate.h"
#include "profiler/fitting.h"
#include "profiler/importers.h"

namespace spotdnn {
namespace {

using predictor::ConvergenceModel;
using predictor::LrSchedule;
using profiler::ConvergenceRun;

TEST(LrScheduleTest, ParsesAndPrintsEveryKind) {
  for (const char* text : {"constant", "step:32000*0.1,48000*0.5", "cosine:64000",
                           "warmup:500+cosine:64000", "warmup:500+step:1000*0.2", "warmup:300"}) {
    auto s = predictor::ParseLrSchedule(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_EQ(predictor::LrScheduleText(*s), text);
  }
  auto step = predictor::ParseLrSchedule("step:32000");
  ASSERT_TRUE(step.ok());
  EXPECT_DOUBLE_EQ(step->RateAt(31999), 1);
  EXPECT_DOUBLE_EQ(step->RateAt(32001), 0.1);
  auto cosine = predictor::ParseLrSchedule("warmup:100+cosine:1000");
  ASSERT_TRUE(cosine.ok());
  EXPECT_DOUBLE_EQ(cosine->RateAt(50), 0.5);
  EXPECT_NEAR(cosine->RateAt(500), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(cosine->RateAt(1000), 0);
}

TEST(LrScheduleTest, RefusesBadSchedulesNamingThePart) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"linear:5", "expected constant"}, Case{"step:", "not a number"},
        Case{"step:4000,2000", "drop_steps[1] = 2000"},
        Case{"step:4000*1.5", "drop_factors[0] = 1.5"},
        Case{"cosine:-3", "cosine_horizon_steps = -3"},
        Case{"warmup:x+constant", "\"x\" is not a number"}, Case{"step:nan", "not a number"}}) {
    auto s = predictor::ParseLrSchedule(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status();
  }
}

// A known model: saturating curve, drops at 30,000 and 45,000 steps.
ConvergenceModel Truth() {
  ConvergenceModel m;
  m.metric = "accuracy";
  m.higher_is_better = true;
  m.floor = 0.12;
  m.floor_exp = 0.15;
  m.amplitude = 0.8;
  m.scale = 2500;
  m.scale_exp = 0.7;
  m.schedule.kind = LrSchedule::Kind::kStepDecay;
  m.schedule.drop_steps = {30000, 45000};
  m.schedule.drop_factors = {0.1, 0.1};
  m.drop_ratios = {0.55, 0.6};
  m.drop_time_steps = 40;
  m.noise_sd = 0.01;
  m.noise_exp = 0.5;
  m.noise_sd_after = 0.004;
  m.noise_exp_after = 0.5;
  m.eval_interval_steps = 1000;
  return m;
}

// `runs` runs per cluster size of `truth`, evaluated every 1,000 steps (plus one step per worker,
// as an asynchronous cluster's global step runs ahead), with the model's own noise: each run's
// own offset (noise_run_share of the variance) and a fresh draw at each evaluation.
std::vector<ConvergenceRun> Generate(const ConvergenceModel& truth, std::vector<int> sizes,
                                     int runs, double end, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<ConvergenceRun> out;
  const double run_part = std::sqrt(truth.noise_run_share);
  const double eval_part = std::sqrt(1 - truth.noise_run_share);
  for (int n : sizes) {
    for (int k = 0; k < runs; ++k) {
      ConvergenceRun r;
      r.job = "n" + std::to_string(n) + "-" + std::to_string(k);
      r.workers = n;
      const double offset = run_part * normal(rng);
      for (double s = 0; s <= end; s += 1000 + n) {
        const double mean = predictor::MeanValueAt(truth, n, 0, s);
        const bool after =
            !truth.schedule.drop_steps.empty() && s > truth.schedule.drop_steps.front();
        const double sd = after ? truth.noise_sd_after * std::pow(n, truth.noise_exp_after)
                                : truth.noise_sd * std::pow(n, truth.noise_exp);
        r.points.push_back({s, mean + sd * (offset + eval_part * normal(rng))});
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

TEST(ConvergenceFitTest, DetectsStepDropsAtKnownSteps) {
  const ConvergenceModel truth = Truth();
  const auto runs = Generate(truth, {1, 2, 4, 8}, 5, 60000, 7);
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  auto fit = profiler::FitConvergence(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const LrSchedule& s = fit->model.schedule;
  ASSERT_EQ(s.kind, LrSchedule::Kind::kStepDecay);
  EXPECT_TRUE(s.detected);
  ASSERT_EQ(s.drop_steps.size(), 2u) << predictor::LrScheduleText(s);
  // Found within one evaluation interval of where they are.
  EXPECT_NEAR(s.drop_steps[0], 30000, 1010);
  EXPECT_NEAR(s.drop_steps[1], 45000, 1010);
  EXPECT_NEAR(fit->model.drop_ratios[0], 0.55, 0.08);
  EXPECT_NEAR(fit->model.drop_ratios[1], 0.6, 0.08);
}

// Runs that stay above or below the mean (their own offset) are told from runs whose every
// evaluation scatters afresh: the fit measures the share of the spread that is a run's own.
TEST(ConvergenceFitTest, MeasuresTheShareOfTheSpreadThatIsARunsOwn) {
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  options.schedule = Truth().schedule;
  for (double share : {0.0, 0.4, 0.8}) {
    ConvergenceModel truth = Truth();
    truth.noise_run_share = share;
    auto fit = profiler::FitConvergence(Generate(truth, {1, 2, 4, 8}, 12, 60000, 5), options);
    ASSERT_TRUE(fit.ok()) << fit.status();
    EXPECT_NEAR(fit->model.noise_run_share, share, 0.12)
        << predictor::DescribeConvergence(fit->model);
    std::string notes;
    for (const std::string& n : fit->notes) notes += n + "\n";
    EXPECT_NE(notes.find("of the spread's variance is the run's own"), std::string::npos) << notes;
  }
}

// A target the mean curve only grazes before a drop is reached by chance: by most runs within a
// few evaluations when each evaluation draws afresh, later (many only after the drop) when a run
// that is behind stays behind.
TEST(ConvergenceModelTest, ARunsOwnOffsetDelaysAPlateauTarget) {
  ConvergenceModel m;
  m.metric = "accuracy";
  m.higher_is_better = true;
  m.floor = 0.16;  // the mean plateaus at 0.84, then the drop at 40,000 takes it to 0.92
  m.amplitude = 0.7;
  m.scale = 3000;
  m.schedule = *predictor::ParseLrSchedule("step:40000");
  m.drop_ratios = {0.5};
  m.drop_time_steps = 100;
  m.noise_sd = 0.02;
  m.noise_sd_after = 0.005;
  m.eval_interval_steps = 4000;
  ASSERT_TRUE(m.Validate().ok()) << m.Validate();
  const auto fresh = predictor::StepsToTarget(m, 1, 0, 0.85);
  m.noise_run_share = 0.6;
  ASSERT_TRUE(m.Validate().ok());
  const auto persistent = predictor::StepsToTarget(m, 1, 0, 0.85);
  ASSERT_TRUE(fresh.reachable);
  ASSERT_TRUE(persistent.reachable);
  EXPECT_LT(fresh.p90, 40000) << "fresh draws cross the plateau target before the drop";
  EXPECT_GT(persistent.p50, 1.3 * fresh.p50);
  EXPECT_GT(persistent.p90, 40000) << "runs that stay behind reach it only after the drop";
  EXPECT_GT(persistent.p90 - persistent.p10, fresh.p90 - fresh.p10);
  m.noise_run_share = 1;
  EXPECT_NE(m.Validate().message().find("noise_run_share"), std::string::npos);
}

TEST(ConvergenceFitTest, FindsNoDropInACurveWithout) {
  ConvergenceModel truth = Truth();
  truth.schedule = LrSchedule{};
  truth.drop_ratios.clear();
  const auto runs = Generate(truth, {1, 4}, 4, 40000, 3);
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  auto fit = profiler::FitConvergence(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->model.schedule.kind, LrSchedule::Kind::kConstant)
      << predictor::LrScheduleText(fit->model.schedule);
}

TEST(ConvergenceFitTest, RecoversKnownParametersFromNoisyCurves) {
  const ConvergenceModel truth = Truth();
  const auto runs = Generate(truth, {1, 2, 4, 8}, 5, 60000, 11);
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  options.schedule = truth.schedule;  // declared
  auto fit = profiler::FitConvergence(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const ConvergenceModel& m = fit->model;
  EXPECT_NEAR(m.floor, truth.floor, 0.1 * truth.floor);
  EXPECT_NEAR(m.floor_exp, truth.floor_exp, 0.05);
  EXPECT_NEAR(m.amplitude, truth.amplitude, 0.2 * truth.amplitude);
  EXPECT_NEAR(m.scale, truth.scale, 0.15 * truth.scale);
  EXPECT_NEAR(m.scale_exp, truth.scale_exp, 0.1);
  EXPECT_NEAR(m.drop_ratios[0], truth.drop_ratios[0], 0.05);
  EXPECT_NEAR(m.drop_ratios[1], truth.drop_ratios[1], 0.05);
  // The spread law: sd = a N^b before the drop.
  EXPECT_NEAR(m.noise_sd, truth.noise_sd, 0.3 * truth.noise_sd);
  EXPECT_NEAR(m.noise_exp, truth.noise_exp, 0.2);
  EXPECT_NEAR(m.eval_interval_steps + m.eval_interval_per_worker_steps * 4, 1004, 2);
  // Steps to a target on a size it never saw (3 workers) within 5% of the truth's, and the
  // truth's median inside the fitted interval.
  for (double target : {0.75, 0.8, 0.85, 0.93}) {
    const auto want = predictor::StepsToTarget(truth, 3, 0, target);
    const auto got = predictor::StepsToTarget(m, 3, 0, target);
    ASSERT_TRUE(want.reachable && got.reachable) << target;
    EXPECT_NEAR(got.p50, want.p50, 0.05 * want.p50) << target;
    EXPECT_LE(got.p10, want.p50) << target;
    EXPECT_GE(got.p90, want.p50) << target;
  }
}

TEST(ConvergenceModelTest, PercentilesAreOrderedAndDeterministic) {
  const ConvergenceModel m = Truth();
  const auto a = predictor::StepsToTarget(m, 4, 0, 0.85);
  const auto b = predictor::StepsToTarget(m, 4, 0, 0.85);
  ASSERT_TRUE(a.reachable);
  EXPECT_EQ(a.p50, b.p50);
  EXPECT_LE(a.p10, a.p50);
  EXPECT_LE(a.p50, a.p90);
  // More workers need more global steps (the curve's time scale grows with N).
  EXPECT_GT(predictor::StepsToTarget(m, 8, 0, 0.8).p50, predictor::StepsToTarget(m, 1, 0, 0.8).p50);
  // A target above what the runs reach is not reachable.
  EXPECT_FALSE(predictor::StepsToTarget(m, 4, 0, 0.999).reachable);
  // From a running job's step: fewer steps left.
  const auto later = predictor::StepsToTarget(m, 4, 0, 0.85, 10000);
  EXPECT_LT(later.p50, a.p50);
}

// A profile with these convergence models, on a one-type catalog.
absl::StatusOr<predictor::PerformanceModel> ModelOf(std::vector<ConvergenceModel> convergence) {
  predictor::WorkloadProfile profile;
  profile.name = "synthetic";
  profile.parameter_size_mb = 10;
  profile.required_bandwidth_mb_per_s = 1000;
  profile.compute.push_back({.instance_type = "t", .batch_per_gpu = 32, .compute_time_s = 0.1});
  profile.contention = predictor::ContentionModel{0, 0};
  profile.convergence = std::move(convergence);
  predictor::InstanceCatalog catalog;
  catalog.name = "c";
  catalog.types.push_back({.name = "t",
                           .gpu_type = "g",
                           .gpus = 1,
                           .gpu_memory_gib = 16,
                           .spot_price_per_hour = 1,
                           .on_demand_price_per_hour = 3,
                           .quota = 8});
  catalog.parameter_server.bandwidth_mb_per_s = 1000;
  catalog.pcie_bandwidth_mb_per_s = 10000;
  return predictor::PerformanceModel::Create(profile, catalog);
}

TEST(ConvergenceModelTest, AccuracyAndLossTargetsAgreeOnOneCurve) {
  // The same error curve as a loss (lower is better) and as an accuracy (1 - error).
  ConvergenceModel acc = Truth();
  ConvergenceModel loss = acc;
  loss.metric = "loss";
  loss.higher_is_better = false;
  auto model = ModelOf({acc, loss});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int> counts = {4};
  const auto by_accuracy = model->Evaluate(counts, predictor::Target::Accuracy(0.85));
  const auto by_loss = model->Evaluate(counts, predictor::Target::Loss(0.15));
  ASSERT_TRUE(by_accuracy.ok() && by_loss.ok());
  EXPECT_TRUE(by_accuracy.has_spread);
  EXPECT_NEAR(by_accuracy.iterations_p50, by_loss.iterations_p50, 1e-6);
  EXPECT_NEAR(by_accuracy.iterations_p10, by_loss.iterations_p10, 1e-6);
  EXPECT_NEAR(by_accuracy.iterations_p90, by_loss.iterations_p90, 1e-6);
  EXPECT_NEAR(by_accuracy.time_p90_s,
              by_accuracy.iterations_p90 * by_accuracy.expected_iteration_time_s, 1e-6);
  // A metric the profile has no model of is refused, naming what it has.
  const auto top5 = model->Evaluate(counts, predictor::Target::Metric("top5", true, 0.9));
  EXPECT_EQ(top5.error, predictor::EstimateError::kNoConvergenceModel);
  EXPECT_NE(model->ErrorStatus(top5, predictor::Target::Metric("top5", true, 0.9))
                .message()
                .find("accuracy (higher is better), loss"),
            std::string::npos);
}

// The ICAC 2019 homogeneous runs, each folder with its cluster size.
std::vector<ConvergenceRun> IcacRuns() {
  const char* dir = std::getenv("SPOTDNN_DATA_DIR");
  std::string root = dir ? dir : SPOTDNN_DATA_DIR;
  root += "/icac2019";
  if (!std::filesystem::exists(root)) return {};
  std::vector<std::pair<std::string, int>> folders;
  for (int n = 2; n <= 8; ++n) {
    folders.push_back({"experiment_1ps_vs_2ps/1ps" + std::to_string(n) + "v", 0});
    folders.push_back({"experiment_1ps_vs_2ps/2ps" + std::to_string(n) + "k", 0});
    folders.push_back({"experiment_1ps_vs_2ps/1ps_k80/" + std::to_string(n) + "_data.csv", n});
  }
  for (auto [f, n] : std::vector<std::pair<std::string, int>>{{"k80_on_demand/k80-demand", 1},
                                                              {"k80_on_demand/2-demand", 2},
                                                              {"k80_on_demand/4-demand", 4},
                                                              {"k80_on_demand/8-demand", 8},
                                                              {"k80_spot/2-spot", 2},
                                                              {"k80_spot/4-spot", 4},
                                                              {"k80_spot/8-spot", 8},
                                                              {"p100_v100_spot/p100", 1},
                                                              {"p100_v100_spot/v100", 1},
                                                              {"p100_v100_spot/4p100", 4},
                                                              {"p100_v100_spot/4v100", 4}}) {
    folders.push_back({f, n});
  }
  std::vector<ConvergenceRun> runs;
  int index = 0;
  for (const auto& [f, n] : folders) {
    profiler::ImportOptions o;
    o.cluster_workers = n;
    o.job_id = "f" + std::to_string(index++);
    auto imported = profiler::ImportPath(root + "/" + f, o);
    EXPECT_TRUE(imported.ok()) << f << ": " << imported.status();
    if (!imported.ok()) continue;
    for (auto& r : profiler::ConvergenceRunsOf(imported->samples, "accuracy")) {
      runs.push_back(std::move(r));
    }
  }
  return runs;
}

TEST(ConvergenceFitTest, IcacRunsLeaveOneSizeOut) {
  const auto runs = IcacRuns();
  if (runs.empty()) GTEST_SKIP() << "no ../shared/data/icac2019";
  EXPECT_EQ(runs.size(), 283u);
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  options.schedule = *predictor::ParseLrSchedule("step:32000");
  auto v = profiler::ValidateConvergence(runs, {}, {0.80, 0.85, 0.88}, options);
  ASSERT_TRUE(v.ok()) << v.status();
  // Measured 8.4% over 24 checks, 23 inside the interval; eq. 3 as written is about 21%.
  EXPECT_LT(v->mape, 14) << "MAPE of steps to 0.80/0.85/0.88 with each size left out";
  EXPECT_GE(v->inside, 18) << "of " << v->compared;
  options.form = ConvergenceModel::Form::kEq3;
  options.schedule = LrSchedule{};
  auto eq3 = profiler::ValidateConvergence(runs, {}, {0.80, 0.85, 0.88}, options);
  ASSERT_TRUE(eq3.ok()) << eq3.status();
  EXPECT_GT(eq3->mape, v->mape) << "the schedule should beat eq. 3 as written";
}

// In sample, 4 workers to accuracy 0.85, a target the curves reach only on their plateau before
// the drop at 32,000: the runs' median is 25,928 steps. Runs that are behind stay behind (their
// evaluations correlate), so the model must not let each evaluation cross by chance afresh: it
// said 23,774 (-8%) when it did.
TEST(ConvergenceFitTest, IcacPlateauTargetInSample) {
  const auto runs = IcacRuns();
  if (runs.empty()) GTEST_SKIP() << "no ../shared/data/icac2019";
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  auto v = profiler::ValidateConvergence(runs, {1, 2, 3, 4, 5, 6, 7, 8}, {0.85}, options);
  ASSERT_TRUE(v.ok()) << v.status();
  bool checked = false;
  for (const auto& c : v->checks) {
    if (c.workers != 4) continue;
    checked = true;
    ASSERT_TRUE(c.observed.has_value());
    EXPECT_NEAR(*c.observed, 25928, 1);
    // Measured +0.6% (26,091); the runs' median itself moves by about 4% from one half of the
    // runs to the other.
    EXPECT_LT(c.error_pct, 5) << "p50 " << c.predicted.p50;
    EXPECT_TRUE(c.inside);
  }
  EXPECT_TRUE(checked);
  EXPECT_GT(v->mape, 0);
}

}  // namespace
}  // namespace spotdnn

namespace spotdnn {
namespace {

// A fit thinned to at most 1,500 evaluations says which it kept in words: "every 2nd of a run".
TEST(ConvergenceFitTest, AThinnedFitSaysWhichEvaluationsItKeptAsAnOrdinal) {
  const auto runs = Generate(Truth(), {1, 2, 4, 8}, 10, 60000, 13);  // about 2,400 evaluations
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  options.schedule = Truth().schedule;
  auto fit = profiler::FitConvergence(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  std::string notes;
  for (const std::string& n : fit->notes) notes += n + "\n";
  EXPECT_NE(notes.find("(every 2nd of each run"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("-th"), std::string::npos) << notes;
}

// The fit keeps the best value its runs reached; a target beyond it (by more than 2% of its
// error) is an extrapolation, which the prediction says (with the best value), and a target its
// runs do not reach says what they reached.
TEST(ConvergenceFitTest, KeepsTheBestValueTheRunsReachedAndFlagsTargetsBeyondIt) {
  const auto runs = Generate(Truth(), {1, 2, 4, 8}, 3, 60000, 21);
  double best = 0;
  for (const ConvergenceRun& r : runs) {
    for (const auto& [step, value] : r.points) {
      if (step > 0) best = std::max(best, value);
    }
  }
  profiler::ConvergenceFitOptions options;
  options.metric = "accuracy";
  options.higher_is_better = true;
  options.schedule = Truth().schedule;
  auto fit = profiler::FitConvergence(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_TRUE(fit->model.best_value.has_value());
  EXPECT_DOUBLE_EQ(*fit->model.best_value, best);
  EXPECT_FALSE(fit->model.IsExtrapolation(best));
  EXPECT_FALSE(fit->model.IsExtrapolation(best - 0.01));
  EXPECT_TRUE(fit->model.IsExtrapolation(best + 0.01));
  // A loss (lower is better): beyond is below.
  ConvergenceModel loss = Truth();
  loss.metric = "loss";
  loss.higher_is_better = false;
  loss.best_value = 0.5;
  EXPECT_TRUE(loss.IsExtrapolation(0.4));
  EXPECT_FALSE(loss.IsExtrapolation(0.495));
  EXPECT_FALSE(loss.IsExtrapolation(0.6));

  ConvergenceModel truth = Truth();  // reaches about 0.95 at 4 workers
  truth.best_value = 0.9;
  auto model = ModelOf({truth});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int> counts = {4};
  const auto beyond = model->Evaluate(counts, predictor::Target::Accuracy(0.93));
  ASSERT_TRUE(beyond.ok()) << model->ErrorStatus(beyond, predictor::Target::Accuracy(0.93));
  EXPECT_TRUE(beyond.extrapolated);
  EXPECT_DOUBLE_EQ(beyond.data_best, 0.9);
  const auto within = model->Evaluate(counts, predictor::Target::Accuracy(0.85));
  ASSERT_TRUE(within.ok());
  EXPECT_FALSE(within.extrapolated);
  const auto never = model->Evaluate(counts, predictor::Target::Accuracy(0.995));
  EXPECT_EQ(never.error, predictor::EstimateError::kTargetNotReached);
  EXPECT_NE(model->ErrorStatus(never, predictor::Target::Accuracy(0.995))
                .message()
                .find("the profile's runs reached 0.9 at best"),
            std::string::npos);
}

// Every ICAC 2019 folder imported together, as `spotdnn profile import DIR` reads them: the
// folders whose names give no cluster size (the K80 on-demand and spot runs, the P100/V100 runs)
// are left out of the convergence fit with a note, not taken for one worker among the 2-8-worker
// runs; so the fit finds the learning-rate drop at 32,000 and does not promise an accuracy far
// beyond the runs' plateau (0.92-0.93).
TEST(ConvergenceFitTest, IcacFoldersImportedTogetherFindTheDrop) {
  const char* dir = std::getenv("SPOTDNN_DATA_DIR");
  const std::string root = std::string(dir ? dir : SPOTDNN_DATA_DIR) + "/icac2019";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "no " << root;
  profiler::ImportOptions o;
  o.job_id = "icac";
  auto imported = profiler::ImportPath(root, o);
  ASSERT_TRUE(imported.ok()) << imported.status();
  std::vector<profiler::FitQuality> quality;
  const auto models = profiler::FitConvergences(imported->samples, {}, &quality);
  ASSERT_EQ(models.size(), 1u);
  const ConvergenceModel& m = models[0];
  ASSERT_EQ(m.schedule.kind, LrSchedule::Kind::kStepDecay) << predictor::DescribeConvergence(m);
  EXPECT_NEAR(m.schedule.drop_steps[0], 32000, 100) << predictor::DescribeConvergence(m);
  ASSERT_EQ(quality.size(), 1u);
  EXPECT_NE(quality[0].note.find("left out: the cluster size is not known"), std::string::npos)
      << quality[0].note;
  EXPECT_GT(quality[0].r_squared, 0.8);
  ASSERT_TRUE(m.best_value.has_value());
  EXPECT_GT(*m.best_value, 0.92);
  EXPECT_LT(*m.best_value, 0.95);
  for (int n = 1; n <= 8; ++n) {
    EXPECT_FALSE(predictor::StepsToTarget(m, n, std::sqrt((n - 1.0) / n), 0.99).reachable) << n;
  }
}

}  // namespace
}  // namespace spotdnn
