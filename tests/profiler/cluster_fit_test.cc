// Fits of whole runs' speeds: the shared parameter-server model recovers known parameters from
// data it generated, says what the runs cannot identify, predicts heterogeneous clusters it never
// saw, and on the real ICAC 2019 runs predicts held-out cluster sizes better than the paper's form.
#include "profiler/cluster_fit.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "predictor/equations.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The truth the data are generated from.
SharedPsFit Truth() {
  SharedPsFit t;
  t.compute_time_s = {{"K80", 0.2}, {"P100", 0.06}, {"V100", 0.047}};
  t.service_time_s = 0.021;
  t.queueing = 0.3;
  return t;
}

// Homogeneous configurations like the ICAC study's, speeds with 1% multiplicative noise.
std::vector<ClusterObservation> Observations(const SharedPsFit& truth, double sigma = 0.01) {
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, sigma);
  std::vector<ClusterObservation> out;
  auto add = [&](const std::string& type, int n, int ps) {
    ClusterObservation o;
    o.composition = {{type, n}};
    o.parameter_servers = ps;
    o.runs = 5;
    o.steps_per_s = truth.StepsPerS(o.composition, ps) * (1 + noise(rng));
    out.push_back(o);
  };
  for (int n = 1; n <= 8; ++n) {
    add("K80", n, 1);
    add("V100", n, 1);
    if (n >= 2) add("K80", n, 2);
  }
  add("P100", 1, 1);
  add("P100", 4, 1);
  return out;
}

TEST(FitSharedPs, RecoversKnownParametersFromGeneratedRuns) {
  const SharedPsFit truth = Truth();
  auto fit = FitSharedPs(Observations(truth));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->queueing_identified);
  for (const auto& [type, z] : truth.compute_time_s) {
    EXPECT_NEAR(fit->fit.compute_time_s.at(type) / z, 1, 0.03) << type;
  }
  EXPECT_NEAR(fit->fit.service_time_s / truth.service_time_s, 1, 0.05);
  EXPECT_NEAR(fit->fit.queueing, truth.queueing, 0.15);
  // Clusters it never saw: mixed types, two servers for V100.
  for (const auto& [composition, ps] : std::vector<std::pair<std::map<std::string, int>, int>>{
           {{{"K80", 2}, {"P100", 1}, {"V100", 1}}, 1},
           {{{"K80", 1}, {"P100", 2}, {"V100", 4}}, 1},
           {{{"V100", 8}}, 2},
           {{{"P100", 3}, {"V100", 3}}, 2}}) {
    EXPECT_NEAR(fit->fit.StepsPerS(composition, ps) / truth.StepsPerS(composition, ps), 1, 0.02)
        << CompositionText(composition) << ", " << ps << " PS";
  }
  // The quality rows say what each parameter is.
  std::set<std::string> rows;
  for (const FitQuality& q : fit->quality) rows.insert(q.parameter);
  EXPECT_TRUE(rows.count("T_comp[K80]") && rows.count("S_parm") && rows.count("queueing") &&
              rows.count("shared-ps"));
}

TEST(FitSharedPs, SaysWhatTheRunsCannotIdentify) {
  const SharedPsFit truth = Truth();
  // One configuration per type: compute cannot be told from the servers' time.
  std::vector<ClusterObservation> one;
  for (const ClusterObservation& o : Observations(truth)) {
    if (o.composition.begin()->second == 4 && o.parameter_servers == 1) one.push_back(o);
  }
  auto fit = FitSharedPs(one);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fit.status().message(), HasSubstr("2 or more cluster sizes"));
  // Two sizes of one type: d is identified, kappa is not and is held at 0.5.
  std::vector<ClusterObservation> two;
  for (const ClusterObservation& o : Observations(truth)) {
    const int n = o.composition.begin()->second;
    if (o.composition.count("V100") && (n == 1 || n == 2) && o.parameter_servers == 1) {
      two.push_back(o);
    }
  }
  fit = FitSharedPs(two);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_FALSE(fit->queueing_identified);
  EXPECT_EQ(fit->fit.queueing, 0.5);
  bool noted = false;
  for (const FitQuality& q : fit->quality) {
    if (q.parameter == "queueing")
      noted = !q.identified && q.note.find("held at") != std::string::npos;
  }
  EXPECT_TRUE(noted);
  // A known d (from a base profile) and kappa are kept.
  fit = FitSharedPs(Observations(truth), {.service_time_s = 0.021, .queueing = 0.3});
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->fit.service_time_s, 0.021);
  EXPECT_EQ(fit->fit.queueing, 0.3);
}

TEST(FitPaperForm, FitsThePapersEquationsToTheSameRuns) {
  auto fit = FitPaperForm(Observations(Truth()), {}, 1000);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GT(fit->fit.parameter_size_mb, 0);
  EXPECT_GT(fit->fit.required_bandwidth_mb_per_s, 0);
  EXPECT_EQ(FitPaperForm(Observations(Truth()), {}, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Checkpoint samples of one run: `speed` steps/s from `start`, a row every 4000 steps.
std::vector<Sample> CheckpointRun(const std::string& job, const std::string& gpu, int n, int ps,
                                  double speed, const std::string& cluster = "") {
  std::vector<Sample> out;
  for (int step = 0; step <= 64000; step += 4000) {
    Sample s;
    s.job_id = job;
    s.step = step;
    s.wall_time_s = 1.55e9 + step / speed;
    s.accuracy = 0.1 + 0.8 * step / 64000.0;
    s.gpu_type = cluster.empty() ? gpu : "";
    s.instance_type = cluster.empty() ? "gce-" + gpu : "";
    s.cluster_workers = n;
    s.parameter_servers = ps;
    s.batch_size = 128;
    s.cluster = cluster;
    out.push_back(s);
  }
  return out;
}

TEST(RunsFromSamples, TakesTheSpeedFromTheWayEachRunWasMeasured) {
  std::vector<Sample> samples = CheckpointRun("a/run-1", "V100", 4, 1, 40);
  // A restart: the run's speed counts from its last start.
  std::vector<Sample> restarted = CheckpointRun("a/run-2", "V100", 4, 1, 40);
  Sample stale = restarted[3];
  stale.wall_time_s -= 5000;
  stale.step = 30000;
  restarted.insert(restarted.begin(), stale);
  samples.insert(samples.end(), restarted.begin(), restarted.end());
  // Per-worker iteration times of 2 K80 workers; and the logged speeds of a TensorBoard export.
  for (int i = 0; i < 10; ++i) {
    Sample b;
    b.job_id = "b";
    b.worker_id = "w0";
    b.gpu_type = "K80";
    b.iteration_time_s = 0.22;
    b.cluster_workers = 2;
    samples.push_back(b);
    Sample c;
    c.job_id = "c";
    c.gpu_type = "P100";
    c.step = 100 * i;
    c.cluster_workers = 4;
    c.cluster_steps_per_s = 38 + (i % 3);
    samples.push_back(c);
  }
  Sample untyped;
  untyped.job_id = "untyped";
  untyped.wall_time_s = 1;
  untyped.cluster_steps_per_s = 5;
  samples.push_back(untyped);
  const RunSet runs = RunsFromSamples(samples);
  ASSERT_EQ(runs.runs.size(), 4u);
  EXPECT_NEAR(runs.runs[0].steps_per_s, 40, 1e-9);
  EXPECT_NEAR(runs.runs[0].steps, 64000, 1e-9);
  EXPECT_NEAR(runs.runs[0].duration_s, 1600, 1e-6);
  EXPECT_NEAR(runs.runs[1].steps_per_s, 40, 1e-9);
  EXPECT_NEAR(runs.runs[2].steps_per_s, 2 / 0.22, 1e-9);
  EXPECT_NEAR(runs.runs[3].steps_per_s, 39, 1e-9);  // the median
  EXPECT_EQ(runs.types.at("gce-V100").gpu_type, "V100");
  EXPECT_EQ(runs.types.at("gce-V100").batch_per_gpu, 128);
  ASSERT_EQ(runs.notes.size(), 1u);
  EXPECT_THAT(runs.notes[0], AllOf(HasSubstr("untyped"), HasSubstr("no instance_type")));
  const std::vector<ClusterObservation> obs = GroupRuns(runs.runs);
  ASSERT_EQ(obs.size(), 3u);  // the two V100 runs are one configuration
  EXPECT_EQ(obs[2].runs, 2);
  EXPECT_EQ(obs[2].Describe(), "gce-V100=4, 1 PS");
}

TEST(RunsFromSamples, TwoRunsImportedUnderOneJobStayTwoRuns) {
  std::vector<Sample> samples = CheckpointRun("same/run-1", "V100", 4, 1, 40);
  for (Sample s : CheckpointRun("same/run-1", "V100", 4, 1, 30)) {
    s.wall_time_s += 1e5;  // a later run of the same cluster, imported with the same --job
    samples.push_back(s);
  }
  const RunSet runs = RunsFromSamples(samples);
  ASSERT_EQ(runs.runs.size(), 2u);
  EXPECT_NEAR(runs.runs[0].steps_per_s, 40, 1e-9);
  EXPECT_NEAR(runs.runs[1].steps_per_s, 30, 1e-6);  // wall times near 1.55e9 s
  EXPECT_EQ(GroupRuns(runs.runs)[0].runs, 2);
}

// Samples of the ICAC-like study generated from the truth, with `gce-` instance types.
std::vector<Sample> StudySamples(const SharedPsFit& truth) {
  std::vector<Sample> out;
  for (const ClusterObservation& o : Observations(truth, 0.005)) {
    const auto& [type, n] = *o.composition.begin();
    for (const Sample& s :
         CheckpointRun(absl::StrCat(type, "-", n, "-", o.parameter_servers, "/run-1"), type, n,
                       o.parameter_servers, o.steps_per_s)) {
      out.push_back(s);
    }
  }
  return out;
}

TEST(ValidateFit, FitsOnOneSetAndPredictsMixedClustersOfAnother) {
  SharedPsFit truth = Truth();
  std::map<std::string, double> keyed;
  for (const auto& [type, z] : truth.compute_time_s) keyed["gce-" + type] = z;
  const std::vector<Sample> fit = StudySamples(truth);
  truth.compute_time_s = keyed;
  std::vector<Sample> check;
  for (const std::string cluster : {"gce-K80=2,gce-P100=1,gce-V100=1", "gce-P100=2,gce-V100=2"}) {
    const auto composition = *ParseComposition(cluster);
    for (const Sample& s :
         CheckpointRun("mixed-" + cluster, "", 0, 1, truth.StepsPerS(composition, 1), cluster)) {
      Sample c = s;
      c.cluster_workers = 0;
      check.push_back(c);
    }
  }
  KnownParameters known;
  known.ps_bandwidth_mb_per_s = 1000;
  auto validation = ValidateFit(fit, check, known);
  ASSERT_TRUE(validation.ok()) << validation.status();
  EXPECT_EQ(validation->profile.variant, predictor::ModelVariant::kSharedPs);
  EXPECT_NEAR(validation->profile.parameter_size_mb, 0.021 * 1000 / 2, 0.4);
  ASSERT_EQ(validation->clusters.size(), 2u);
  for (const ClusterCheck& c : validation->clusters) {
    EXPECT_LT(c.error_pct, 2.0) << c.observed.Describe();
    EXPECT_NEAR(c.iterations, 64000, 1e-9);
    EXPECT_NEAR(c.observed_time_s, 64000 / c.observed.steps_per_s, 1e-6);
  }
  EXPECT_LT(validation->mape, 2.0);
  // A check cluster of a type the fit never saw.
  std::vector<Sample> t4 = CheckpointRun("t4", "T4", 2, 1, 10);
  auto unknown = ValidateFit(fit, t4, known);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unknown.status().message(), HasSubstr("gce-T4 (T4)"));
}

TEST(FitWorkload, ChoosesSharedPsForRunsAndNamesWhatItNeeds) {
  const std::vector<Sample> samples = StudySamples(Truth());
  KnownParameters known;
  known.ps_bandwidth_mb_per_s = 1000;
  auto fit = FitWorkload(samples, known);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->variant, predictor::ModelVariant::kSharedPs);
  ASSERT_TRUE(fit->shared_ps.has_value());
  EXPECT_NEAR(*fit->parameter_size_mb, 10.5, 0.5);
  EXPECT_EQ(*fit->required_bandwidth_mb_per_s, 1000);
  // Entries by instance type and, as each GPU type belongs to one of them, by GPU type too.
  EXPECT_EQ(fit->compute.size(), 6u);
  // Without B_ps the servers' time cannot be put in MB: the paper variant, and why not shared-ps.
  auto without = FitWorkload(samples, {});
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->variant, predictor::ModelVariant::kPaper);
  bool said = false;
  for (const FitQuality& q : without->quality) {
    said |= q.parameter == "shared-ps" && q.note.find("--ps-bandwidth") != std::string::npos;
  }
  EXPECT_TRUE(said);
  // Asked for shared-ps without B_ps: an error naming what is missing.
  known.ps_bandwidth_mb_per_s = 0;
  known.variant = predictor::ModelVariant::kSharedPs;
  EXPECT_EQ(FitWorkload(samples, known).status().code(), absl::StatusCode::kFailedPrecondition);
  // Asked for the paper's form: eqs. 8-9 fitted to the same runs.
  known.ps_bandwidth_mb_per_s = 1000;
  known.variant = predictor::ModelVariant::kPaper;
  auto paper = FitWorkload(samples, known);
  ASSERT_TRUE(paper.ok()) << paper.status();
  EXPECT_EQ(paper->variant, predictor::ModelVariant::kPaper);
  EXPECT_TRUE(paper->contention.has_value());
  EXPECT_TRUE(paper->parameter_size_mb.has_value());
}

// The runs row says which jobs the cluster fit left out, grouped by why, with counts and what to
// do: not just "3 left out, first: ...".
TEST(FitWorkload, TheRunsRowGroupsTheJobsLeftOutByWhy) {
  std::vector<Sample> samples = StudySamples(Truth());
  for (const char* job : {"untyped-1", "untyped-2"}) {
    Sample s;
    s.job_id = job;
    s.wall_time_s = 1;
    s.cluster_steps_per_s = 5;
    samples.push_back(s);
  }
  Sample no_speed;
  no_speed.job_id = "no-speed";
  no_speed.instance_type = "gce-K80";
  no_speed.gpu_type = "K80";
  no_speed.cluster_workers = 2;
  samples.push_back(no_speed);
  KnownParameters known;
  known.ps_bandwidth_mb_per_s = 1000;
  auto fit = FitWorkload(samples, known);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const FitQuality* runs = nullptr;
  for (const FitQuality& q : fit->quality) {
    if (q.parameter == "runs") runs = &q;
  }
  ASSERT_NE(runs, nullptr);
  EXPECT_THAT(runs->note,
              HasSubstr("3 jobs left out: 2 because its samples name no instance_type or gpu_type "
                        "(import it with --instance-type or --gpu-type) (the first: untyped-1); 1 "
                        "because no speed"));
  EXPECT_THAT(runs->note, HasSubstr("(the first: no-speed (gce-K80=2))"));
}

// The cluster fits poll the fit's stop check at every solver iteration too: a shared-ps fit (and a
// validation, which fits) ends with the stop's status, and the check is not asked again.
TEST(FitWorkload, TheClusterFitsStopWhenTheStopCheckSaysSo) {
  const std::vector<Sample> samples = StudySamples(Truth());
  auto count_polls = [&](const KnownParameters& known) {
    int polls = 0;
    auto fit = FitWorkload(samples, known, [&] {
      ++polls;
      return absl::OkStatus();
    });
    EXPECT_TRUE(fit.ok()) << fit.status();
    return polls;
  };
  // Without B_ps the shared-ps fit is refused before it solves anything.
  const int without_cluster_fit = count_polls({});
  KnownParameters known;
  known.ps_bandwidth_mb_per_s = 1000;
  const int with_cluster_fit = count_polls(known);
  EXPECT_GT(with_cluster_fit, without_cluster_fit + 10);
  const int stop_at = without_cluster_fit + 5;  // inside the shared-ps solves
  int polls = 0;
  auto stopped = FitWorkload(samples, known, [&]() -> absl::Status {
    return ++polls >= stop_at ? absl::DeadlineExceededError("the fit ran past its deadline")
                              : absl::OkStatus();
  });
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(stopped.status().message(), "the fit ran past its deadline");
  EXPECT_EQ(polls, stop_at);
  // A validation fits the same way.
  polls = 0;
  auto validation = ValidateFit(samples, samples, known, 0, [&]() -> absl::Status {
    return ++polls >= stop_at ? absl::CancelledError("cancelled") : absl::OkStatus();
  });
  EXPECT_EQ(validation.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, stop_at);
  auto unstopped = ValidateFit(samples, samples, known, 0, [] { return absl::OkStatus(); });
  EXPECT_TRUE(unstopped.ok()) << unstopped.status();
}

std::string DataDir() {
  const char* env = std::getenv("SPOTDNN_DATA_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR);
}

// Every shared ICAC 2019 file, imported as `spotdnn profile import` with its flags would.
RunSet IcacRuns() {
  struct Source {
    std::string file, gpu;
    int workers, servers;
  };
  std::vector<Source> sources;
  const std::string e = "experiment_1ps_vs_2ps/";
  for (int n = 2; n <= 8; ++n) {
    sources.push_back({absl::StrCat(e, "1ps", n, "v/train_data.csv"), "V100", n, 1});
    sources.push_back({absl::StrCat(e, "1ps_k80/", n, "_data.csv"), "K80", n, 1});
    sources.push_back({absl::StrCat(e, "2ps", n, "k/train_data.csv"), "K80", n, 2});
  }
  sources.push_back({"k80_on_demand/k80-demand/train_data.csv", "K80", 1, 1});
  for (int n : {2, 4, 8}) {
    sources.push_back({absl::StrCat("k80_on_demand/", n, "-demand/train_data.csv"), "K80", n, 1});
  }
  sources.push_back({"k80_spot/2-spot/train_data.csv", "K80", 2, 1});
  sources.push_back({"k80_spot/4-spot/4-spot-train_data.csv", "K80", 4, 1});
  sources.push_back({"k80_spot/8-spot/train_data.csv", "K80", 8, 1});
  sources.push_back({"p100_v100_spot/p100/train_data.csv", "P100", 1, 1});
  sources.push_back({"p100_v100_spot/v100/train_data.csv", "V100", 1, 1});
  sources.push_back({"p100_v100_spot/4p100/4p100_train_data.csv", "P100", 4, 1});
  sources.push_back({"p100_v100_spot/4v100/4v100_train_data.csv", "V100", 4, 1});
  std::vector<Sample> samples;
  for (const Source& s : sources) {
    ImportOptions o;
    o.job_id = s.file;
    o.gpu_type = s.gpu;
    o.cluster_workers = s.workers;
    o.parameter_servers = s.servers;
    auto imported = ImportPath(DataDir() + "/icac2019/" + s.file, o);
    EXPECT_TRUE(imported.ok()) << imported.status();
    if (imported.ok())
      samples.insert(samples.end(), imported->samples.begin(), imported->samples.end());
  }
  return RunsFromSamples(samples);
}

TEST(IcacRuns, HeldOutClusterSizesArePredictedBetterThanByThePapersForm) {
  if (!std::filesystem::exists(DataDir() + "/icac2019")) {
    GTEST_SKIP() << "ICAC 2019 data not found under " << DataDir();
  }
  const RunSet runs = IcacRuns();
  const std::vector<ClusterObservation> all = GroupRuns(runs.runs);
  ASSERT_EQ(all.size(), 25u);
  // Every configuration of one cluster size held out at a time, all types and server counts.
  double shared_error = 0, paper_error = 0;
  int points = 0;
  for (int size = 1; size <= 8; ++size) {
    std::vector<ClusterObservation> train, test;
    for (const ClusterObservation& o : all) {
      int n = 0;
      for (const auto& [type, count] : o.composition) n += count;
      (n == size ? test : train).push_back(o);
    }
    auto shared = FitSharedPs(train);
    auto paper = FitPaperForm(train, runs.types, 1000);
    ASSERT_TRUE(shared.ok()) << shared.status();
    ASSERT_TRUE(paper.ok()) << paper.status();
    for (const ClusterObservation& o : test) {
      if (shared->fit.StepsPerS(o.composition, o.parameter_servers) == 0) continue;  // unseen type
      shared_error +=
          std::fabs(shared->fit.StepsPerS(o.composition, o.parameter_servers) / o.steps_per_s - 1);
      paper_error +=
          std::fabs(paper->fit.StepsPerS(o.composition, o.parameter_servers) / o.steps_per_s - 1);
      ++points;
    }
  }
  EXPECT_EQ(points, 25);
  const double shared_mape = 100 * shared_error / points, paper_mape = 100 * paper_error / points;
  EXPECT_LT(shared_mape, 4.0);
  EXPECT_LT(shared_mape, paper_mape);
}

}  // namespace
}  // namespace spotdnn::profiler
