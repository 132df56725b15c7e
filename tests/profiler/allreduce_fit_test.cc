#include "profiler/allreduce_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "predictor/allreduce.h"
#include "profiler/batch_scaling.h"
#include "profiler/fitting.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

ImportOptions T4() {
  ImportOptions o;
  o.job_id = "j";
  o.gpu_type = "T4";
  return o;
}

TEST(ThroughputImport, ReadsPlacementsAsSynchronousSamples) {
  auto r = ImportText("placement,local_bsz,step_time,sync_time\n1134,32,0.5,0.2\n4,64,0.3,0.1\n",
                      "p.csv", T4());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples.size(), 2u) << (r->errors.empty() ? "" : r->errors[0]);
  const Sample& s = r->samples[0];
  EXPECT_EQ(s.placement, "1,1,3,4");
  EXPECT_EQ(s.cluster_workers, 9);
  EXPECT_EQ(s.batch_size, 32);
  EXPECT_EQ(s.gpu_type, "T4");
  EXPECT_DOUBLE_EQ(s.iteration_time_s, 0.5);
  EXPECT_DOUBLE_EQ(s.communication_time_s, 0.2);
}

TEST(ThroughputImport, ReadsScalabilityRowsInAnyColumnOrder) {
  auto r = ImportText("num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,6,32,0.5,0.2\n",
                      "s.csv", T4());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples.size(), 1u);
  EXPECT_EQ(r->samples[0].placement, "2,2,1,1");
  auto other = ImportText("local_bsz,step_time,sync_time,num_nodes,num_replicas\n32,0.5,0.2,2,8\n",
                          "s.csv", T4());
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->samples.size(), 1u);
  EXPECT_EQ(other->samples[0].placement, "4,4");
}

TEST(ThroughputImport, NeedsTheGpuType) {
  ImportOptions o = T4();
  o.gpu_type = "";
  auto r = ImportText("placement,local_bsz,step_time,sync_time\n4,32,0.5,0.2\n", "p.csv", o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--gpu-type"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("p.csv"), std::string::npos);
}

TEST(ThroughputImport, RefusesBadRowsNamingFileLineAndField) {
  struct Case {
    std::string row, expected;
  };
  const std::vector<Case> cases = {
      {"1a34,32,0.5,0.2", "p.csv:2: placement = \"1a34\": a non-digit"},
      {"1034,32,0.5,0.2", "p.csv:2: placement = \"1034\": a 0 digit"},
      {"4,0,0.5,0.2", "p.csv:2: local_bsz = 0"},
      {"4,32,0.5,0.7", "p.csv:2: sync_time = 0.7: above the step time 0.5"},
      {"4,32,-0.5,0.2", "p.csv:2: step_time = -0.5: negative"},
      {"4,32,nan,0.2", "p.csv:2: step_time = \"nan\": not a finite number"},
      {"4,32,0.5,-1", "p.csv:2: sync_time = -1: negative"},
  };
  for (const Case& c : cases) {
    ImportOptions o = T4();
    o.stop_on_error = true;
    auto r = ImportText("placement,local_bsz,step_time,sync_time\n" + c.row + "\n", "p.csv", o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.row;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.row << ": " << r.status();
    // Without stop_on_error the row is skipped and counted.
    auto skipped =
        ImportText("placement,local_bsz,step_time,sync_time\n" + c.row + "\n", "p.csv", T4());
    ASSERT_TRUE(skipped.ok());
    EXPECT_EQ(skipped->skipped, 1u) << c.row;
    EXPECT_TRUE(skipped->samples.empty());
  }
}

TEST(SampleLine, CarriesASynchronousSample) {
  auto s = ParseSampleLine(
      "[default0]: SPOTDNN_SAMPLE gpu_type=T4 placement=4,4 ranks=8 local_batch=32 "
      "step=3 iteration_time_s=0.5 sync_time_s=0.2");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->placement, "4,4");
  EXPECT_EQ((*s)->cluster_workers, 8);
  EXPECT_EQ((*s)->batch_size, 32);
  EXPECT_DOUBLE_EQ((*s)->communication_time_s, 0.2);
  EXPECT_TRUE(ValidateSample(**s).ok());
  Sample bad = **s;
  bad.cluster_workers = 6;
  EXPECT_NE(ValidateSample(bad).message().find("cluster_workers = 6"), std::string::npos);
  bad = **s;
  bad.placement = "4,x";
  EXPECT_NE(ValidateSample(bad).message().find("placement = \"4,x\""), std::string::npos);
}

// A rank's line may say its instances and GPUs per instance instead of the placement; what it
// says of the placement must agree, and each bad field is named.
TEST(SampleLine, InstancesAndGpusPerInstanceMakeThePlacement) {
  auto s = ParseSampleLine(
      "SPOTDNN_SAMPLE job_id=j gpu_type=T4 instances=2 gpus_per_instance=4 ranks=8 "
      "local_batch=32 step=3 step_time=0.5 sync_time=0.2");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->placement, "4,4");
  EXPECT_EQ((*s)->cluster_workers, 8);
  EXPECT_EQ((*s)->batch_size, 32);
  EXPECT_DOUBLE_EQ((*s)->communication_time_s, 0.2);
  EXPECT_TRUE(ValidateSample(**s).ok()) << ValidateSample(**s);
  auto agreeing = ParseSampleLine(
      "SPOTDNN_SAMPLE placement=4,4 instances=2 gpus_per_instance=4 local_batch=8 step_time=1");
  ASSERT_TRUE(agreeing.ok()) << agreeing.status();

  struct Case {
    std::string fields, expected;
  };
  const std::vector<Case> cases = {
      {"placement=4,4 instances=3", "instances = 3: the placement \"4,4\" has 2"},
      {"placement=4,4 gpus_per_instance=2",
       "gpus_per_instance = 2: the placement \"4,4\" has 4 GPUs on an instance"},
      {"instances=2", "instances = 2: give instances= and gpus_per_instance= together"},
      {"gpus_per_instance=4", "gpus_per_instance = 4: give instances= and"},
      {"instances=two gpus_per_instance=4", "instances = \"two\": not a number"},
      {"instances=2 gpus_per_instance=1025", "gpus_per_instance = 1025: must be in [1, 1024]"},
      {"instances=-1 gpus_per_instance=4", "instances = -1: must be in [1, "},
      {"placement=11a4", "placement = \"11a4\": entry \"11a4\""},
      {"placement=4,4 local_batch=0", "local_batch = 0: the samples per rank per step"},
  };
  for (const Case& c : cases) {
    auto bad = ParseSampleLine("SPOTDNN_SAMPLE step_time=0.5 " + c.fields);
    absl::Status status = bad.status();
    if (bad.ok()) status = ValidateSample(**bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.fields;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << c.fields << ": " << status;
  }
  // The ranks a line says must be the placement's.
  auto six = ParseSampleLine(
      "SPOTDNN_SAMPLE instances=2 gpus_per_instance=4 ranks=6 local_batch=8 step_time=1");
  ASSERT_TRUE(six.ok());
  EXPECT_NE(ValidateSample(**six).message().find("cluster_workers = 6"), std::string::npos);
  // A synchronous step time without a local batch says nothing about the compute.
  Sample no_batch;
  no_batch.placement = "4,4";
  no_batch.iteration_time_s = 0.5;
  EXPECT_NE(ValidateSample(no_batch).message().find("local_batch = 0"), std::string::npos)
      << ValidateSample(no_batch);
  // A CSV with the same columns.
  auto csv = ImportText("step,step_time,local_batch,instances,gpus_per_instance\n1,0.5,16,3,2\n",
                        "runs.csv", T4());
  ASSERT_TRUE(csv.ok()) << csv.status();
  ASSERT_EQ(csv->samples.size(), 1u) << (csv->errors.empty() ? "" : csv->errors[0]);
  EXPECT_EQ(csv->samples[0].placement, "2,2,2");
}

// Pollux's validation files are convergence curves, each one run at the global batch its name
// says.
TEST(ValidationCurveImport, EachFileIsARunAtItsGlobalBatch) {
  const std::string header = "progress,iteration,metric,grad_sqr,grad_var\n";
  auto r = ImportText(header + "391.0,390,0.4455,8.9,5.0\n782.0,781,0.6007,1.8,1.5\n",
                      "data/cifar10/validation-128.csv", T4());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples.size(), 2u) << (r->errors.empty() ? "" : r->errors[0]);
  const Sample& s = r->samples[1];
  EXPECT_EQ(s.job_id, "j/validation-128");
  EXPECT_EQ(s.batch_size, 128);
  EXPECT_EQ(s.cluster_workers, 1);
  EXPECT_EQ(s.step, 781);
  EXPECT_DOUBLE_EQ(s.metrics.at("validation"), 0.6007);
  EXPECT_TRUE(s.placement.empty());

  // The batch from --batch-size when the name does not say it; contradicting it is refused.
  ImportOptions sized = T4();
  sized.batch_size = 64;
  auto renamed = ImportText(header + "1,10,0.5,1,1\n", "curve.csv", sized);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->samples.at(0).batch_size, 64);
  EXPECT_EQ(renamed->samples.at(0).job_id, "j/validation-64");
  auto unsized = ImportText(header + "1,10,0.5,1,1\n", "curve.csv", T4());
  EXPECT_NE(unsized.status().message().find("curve.csv: a validation curve"), std::string::npos)
      << unsized.status();
  auto contradicted = ImportText(header + "1,10,0.5,1,1\n", "validation-128.csv", sized);
  EXPECT_NE(contradicted.status().message().find("batch_size = 64 contradicts"), std::string::npos)
      << contradicted.status();

  // Bad rows name the file, line and field.
  struct Case {
    std::string row, expected;
  };
  const std::vector<Case> cases = {
      {"1,1.5,0.5,1,1", "v.csv:3: iteration = 1.5: not a whole number"},
      {"1,-3,0.5,1,1", "v.csv:3: iteration = -3: negative"},
      {"1,20,nan,1,1", "v.csv:3: metric = \"nan\": not a finite number"},
      {"1,5,0.5,1,1", "v.csv:3: step = 5: goes backwards"},
      {"1,20,0.5", "v.csv:3: expected 5 comma-separated fields"},
  };
  for (const Case& c : cases) {
    ImportOptions o = sized;
    o.stop_on_error = true;
    auto bad = ImportText(header + "1,10,0.5,1,1\n" + c.row + "\n", "v.csv", o);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << c.row;
    EXPECT_NE(bad.status().message().find(c.expected), std::string::npos)
        << c.row << ": " << bad.status();
  }
}

std::string PolluxDir();

// The whole folder of one model: throughput rows as synchronous samples, validation curves as
// runs, nothing skipped.
TEST(ValidationCurveImport, ImportsAWholePolluxModelFolder) {
  const std::string dir = PolluxDir() + "/cifar10";
  if (!std::filesystem::exists(dir + "/placements.csv")) GTEST_SKIP() << "no Pollux traces";
  auto r = ImportPath(dir, T4());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->skipped, 0u) << (r->errors.empty() ? "" : r->errors[0]);
  EXPECT_EQ(r->files, 8);
  std::map<std::string, int> per_job;
  int synchronous = 0;
  for (const Sample& s : r->samples) {
    if (!s.placement.empty()) {
      ++synchronous;
    } else {
      ++per_job[s.job_id];
    }
  }
  EXPECT_EQ(synchronous, 1183 + 329);  // the two throughput files' rows
  const std::map<std::string, int> want = {{"j/validation-1024", 100}, {"j/validation-128", 100},
                                           {"j/validation-2048", 100}, {"j/validation-256", 100},
                                           {"j/validation-4096", 100}, {"j/validation-512", 100}};
  EXPECT_EQ(per_job, want);
}

// Runs made by a known model: the fit finds its step times again, and says what the runs do not
// identify.
std::vector<AllReduceRun> Synthetic(const predictor::AllReduceModel& m,
                                    const std::vector<std::vector<int>>& placements) {
  std::vector<AllReduceRun> runs;
  for (const auto& p : placements) {
    for (double b : {16.0, 32.0, 64.0}) {
      auto step = predictor::AllReduceStepTime(m, p, {b});
      AllReduceRun r;
      r.gpus_per_instance = p;
      r.local_batch = b;
      r.step_s = step->step_s;
      r.sync_s = step->step_s - step->compute_s;
      runs.push_back(r);
    }
  }
  return runs;
}

predictor::AllReduceModel Truth() {
  predictor::AllReduceModel m;
  m.gpu_type = "T4";
  m.compute_fixed_s = 0.02;
  m.compute_per_sample_s = 0.002;
  m.compute_contention = 0.05;
  m.intra_fixed_s = 0.01;
  m.intra_ring_s = 0.03;
  m.cross_instance = true;
  m.cross_fixed_s = 0.04;
  m.cross_straggler_s = 0.02;
  m.cross_per_gpu_s = 0.01;
  m.overlap_gamma = 1.5;
  return m;
}

TEST(FitAllReduce, RecoversAKnownModelsStepTimes) {
  const auto runs = Synthetic(
      Truth(),
      {{1}, {2}, {3}, {4}, {1, 1}, {2, 2}, {1, 1, 1}, {1, 3}, {1, 1, 1, 1}, {2, 2, 2}, {3, 3}});
  auto fit = FitAllReduce("T4", runs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->model.cross_instance);
  for (const std::vector<int>& p : std::vector<std::vector<int>>{{4, 4, 4, 4}, {2, 2, 2, 2}}) {
    const double want = predictor::AllReduceStepTime(Truth(), p, {32.0})->step_s;
    const double got = predictor::AllReduceStepTime(fit->model, p, {32.0})->step_s;
    EXPECT_NEAR(got / want, 1, 0.02) << p.size();
  }
  ASSERT_EQ(fit->quality.size(), 2u);
  EXPECT_LT(fit->quality[1].mape, 1);
}

// Two-instance all-reduces slower than the growth in N says (as the shared T4 traces measure
// them): the fit finds the two-instance term, and the larger clusters are not bent by it.
TEST(FitAllReduce, RecoversTheTwoInstanceTerm) {
  predictor::AllReduceModel truth = Truth();
  truth.cross_pair_s = 0.08;
  const auto runs = Synthetic(
      truth, {{1}, {2}, {3}, {4}, {1, 1}, {1, 2}, {2, 2}, {1, 1, 1}, {1, 1, 2}, {1, 1, 1, 1}});
  auto fit = FitAllReduce("T4", runs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->model.cross_pair_s, 0.08, 0.01);
  for (const std::vector<int>& p :
       std::vector<std::vector<int>>{{4, 4}, {4, 4, 4, 4}, {2, 2, 2, 2, 2, 2, 2, 2}}) {
    const double want = predictor::AllReduceStepTime(truth, p, {32.0})->step_s;
    const double got = predictor::AllReduceStepTime(fit->model, p, {32.0})->step_s;
    EXPECT_NEAR(got / want, 1, 0.02) << p.size() << " instances of " << p[0];
  }
}

// Runs on one or two instances cannot tell a fixed cross-instance cost from one that grows with
// the instances: the fit keeps the fixed one and names the others, instead of leaving all at 0.
TEST(FitAllReduce, TwoInstancesOnlyKeepTheFixedCrossInstanceCost) {
  predictor::AllReduceModel truth = Truth();
  truth.cross_straggler_s = 0;
  const auto runs = Synthetic(truth, {{1}, {2}, {3}, {4}, {1, 1}, {1, 2}, {2, 2}});
  auto fit = FitAllReduce("T4", runs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->model.cross_fixed_s, truth.cross_fixed_s, 0.005);
  EXPECT_EQ(fit->model.cross_straggler_s, 0);
  EXPECT_EQ(fit->model.cross_pair_s, 0);
  EXPECT_NE(fit->quality[1].note.find("b_s, e_2"), std::string::npos) << fit->quality[1].note;
  const double want = predictor::AllReduceStepTime(truth, {4, 4}, {32.0})->step_s;
  const double got = predictor::AllReduceStepTime(fit->model, {4, 4}, {32.0})->step_s;
  EXPECT_NEAR(got / want, 1, 0.02);
}

TEST(FitAllReduce, OneInstanceLeavesTheCrossInstanceTermsUnfitted) {
  auto fit = FitAllReduce("T4", Synthetic(Truth(), {{1}, {2}, {3}, {4}}));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_FALSE(fit->model.cross_instance);
  EXPECT_NE(fit->quality[1].note.find("a_n, b_s, c_k"), std::string::npos) << fit->quality[1].note;
  EXPECT_TRUE(predictor::AllReduceStepTime(fit->model, {4}, {32.0}).ok());
  EXPECT_EQ(predictor::AllReduceStepTime(fit->model, {4, 4}, {32.0}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The fit's quality: each fitted term with its standard error, and the runs it fits worst.
TEST(FitAllReduce, ReportsEachTermsSpreadAndTheWorstResiduals) {
  auto runs = Synthetic(
      Truth(),
      {{1}, {2}, {3}, {4}, {1, 1}, {2, 2}, {1, 1, 1}, {1, 3}, {1, 1, 1, 1}, {2, 2, 2}, {3, 3}});
  // Measurement noise of a few percent, the same every time.
  for (size_t i = 0; i < runs.size(); ++i) {
    const double noise = 1 + 0.04 * std::sin(3.7 * static_cast<double>(i));
    runs[i].step_s *= noise;
    runs[i].sync_s *= noise;
  }
  auto fit = FitAllReduce("T4", runs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  std::vector<std::string> names;
  for (const ParameterSpread& p : fit->spread) {
    names.push_back(p.parameter);
    EXPECT_TRUE(std::isfinite(p.sd) && p.sd > 0) << p.parameter << " sd " << p.sd;
  }
  const std::vector<std::string> want = {
      "allreduce[T4].a_c", "allreduce[T4].b_c",  "allreduce[T4].d",   "allreduce[T4].a_r",
      "allreduce[T4].b_r", "allreduce[T4].a_n",  "allreduce[T4].b_s", "allreduce[T4].c_k",
      "allreduce[T4].e_2", "allreduce[T4].gamma"};
  EXPECT_EQ(names, want);
  // The compute's terms are well determined by 33 runs at three batches.
  EXPECT_LT(fit->spread[0].sd, 0.5 * fit->spread[0].value);
  EXPECT_LT(fit->spread[1].sd, 0.2 * fit->spread[1].value);
  EXPECT_DOUBLE_EQ(fit->spread[1].value, fit->model.compute_per_sample_s);
  EXPECT_DOUBLE_EQ(fit->spread.back().value, fit->model.overlap_gamma);

  // The five worst, largest first, each what the fitted model gives for that run.
  ASSERT_EQ(fit->worst.size(), 5u);
  double largest = 0;
  for (const AllReduceRun& r : runs) {
    const double got =
        predictor::AllReduceStepTime(fit->model, r.gpus_per_instance, {r.local_batch})->step_s;
    largest = std::max(largest, std::fabs(got - r.step_s) / r.step_s * 100);
  }
  EXPECT_DOUBLE_EQ(std::fabs(fit->worst[0].error_pct), largest);
  for (size_t i = 1; i < fit->worst.size(); ++i) {
    EXPECT_GE(std::fabs(fit->worst[i - 1].error_pct), std::fabs(fit->worst[i].error_pct));
  }
  const FitResidual& w = fit->worst[0];
  EXPECT_EQ(w.parameter, "allreduce[T4]");
  auto placement = ParsePlacement(w.configuration);
  ASSERT_TRUE(placement.ok()) << w.configuration;
  EXPECT_DOUBLE_EQ(w.fitted_s,
                   predictor::AllReduceStepTime(fit->model, *placement, {w.local_batch})->step_s);
  EXPECT_NEAR(w.error_pct, 100 * (w.fitted_s - w.measured_s) / w.measured_s, 1e-9);
}

TEST(FitAllReduce, NothingToFitIsAFailedPrecondition) {
  EXPECT_EQ(FitAllReduce("T4", {}).status().code(), absl::StatusCode::kFailedPrecondition);
}

std::string PolluxDir() {
  const char* env = std::getenv("SPOTDNN_DATA_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR) +
         "/pollux-throughput";
}

// The shared T4 traces: fitted on the runs of at most 4 GPUs, predicting every even run of more
// and every scalability row.
TEST(AllReduceValidation, SixModelsOnTheSharedT4Traces) {
  if (!std::filesystem::exists(PolluxDir() + "/cifar10/placements.csv")) {
    GTEST_SKIP() << "no Pollux traces at " << PolluxDir();
  }
  double mean = 0, pollux_mean = 0;
  const std::vector<std::string> models = {"cifar10",     "imagenet", "bert",
                                           "deepspeech2", "yolov3",   "ncf"};
  for (const std::string& model : models) {
    std::vector<Sample> samples;
    for (const char* file : {"placements.csv", "scalability.csv"}) {
      ImportOptions o = T4();
      o.job_id = model;
      auto r = ImportPath(PolluxDir() + "/" + model + "/" + file, o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->skipped, 0u) << model << " " << file;
      samples.insert(samples.end(), r->samples.begin(), r->samples.end());
    }
    auto check = CheckAllReduce("T4", AllReduceRunsOf(samples, "T4"), 4);
    ASSERT_TRUE(check.ok()) << check.status();
    std::printf("%-12s fitted %3d predicted %3d  MAPE %5.1f%%  Pollux %5.1f%%\n", model.c_str(),
                check->fitted_runs, static_cast<int>(check->rows.size()), check->mape,
                check->pollux_mape);
    mean += check->mape / models.size();
    pollux_mean += check->pollux_mape / models.size();
  }
  std::printf("average      MAPE %5.2f%%  Pollux %5.2f%%\n", mean, pollux_mean);
  // The target is 10%: this form reaches 9.96% here (13.2% without the two-instance term e_2),
  // Pollux's form about 76%.
  EXPECT_LE(mean, 10.0);
  EXPECT_LT(mean, pollux_mean / 4);
}

// `profile fit` on a Pollux model folder (throughput files, and validation-<B>.csv curves at six
// global batches): the convergence model describes the median batch, 512, and holds the critical
// batch the law finds across all six at the levels BatchScalingTargets chooses, so a prediction
// carries its steps to any global batch. With the curve of one batch, that batch and no law.
TEST(SyncConvergenceFit, StoresTheCriticalBatchOfThePolluxCifar10Folder) {
  if (!std::filesystem::exists(PolluxDir() + "/cifar10/placements.csv")) {
    GTEST_SKIP() << "no Pollux traces at " << PolluxDir();
  }
  auto imported = ImportPath(PolluxDir() + "/cifar10", T4());
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto fit = FitWorkload(imported->samples, {});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->sync, predictor::SyncKind::kAllReduce);
  const predictor::ConvergenceModel* model = nullptr;
  for (const predictor::ConvergenceModel& m : fit->convergence) {
    if (m.metric == "validation") model = &m;
  }
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->higher_is_better);
  EXPECT_EQ(model->reference_global_batch, 512);
  ASSERT_TRUE(model->critical_batch.has_value());
  const std::vector<BatchRun> runs = BatchRunsOf(imported->samples, "validation");
  const std::vector<double> targets = BatchScalingTargets(runs, true);
  ASSERT_EQ(targets.size(), 4u);
  auto law = FitBatchScaling(runs, targets, true);
  ASSERT_TRUE(law.ok()) << law.status();
  EXPECT_DOUBLE_EQ(*model->critical_batch, law->critical_batch);
  EXPECT_GT(*model->critical_batch, 128);
  EXPECT_LT(*model->critical_batch, 4096);
  bool row = false;
  for (const FitQuality& q : fit->quality) row |= q.parameter == "critical_batch[validation]";
  EXPECT_TRUE(row);
  // The profile predicts fewer steps at a larger global batch, as the law says.
  const predictor::WorkloadProfile profile = ProfileOf(*fit, {}, "cifar10");
  auto steps = predictor::SyncStepsFor(profile, predictor::Target::Metric("validation", true, 0.9));
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::printf(
      "cifar10: B_crit %.1f at global batch 512; steps to 0.9: %.0f at 128, %.0f at 512, "
      "%.0f at 4096\n",
      *model->critical_batch, steps->At(128), steps->At(512), steps->At(4096));
  EXPECT_GT(steps->At(128), steps->At(512));
  EXPECT_GT(steps->At(512), steps->At(4096));
  const double c = *model->critical_batch;
  EXPECT_NEAR(steps->At(4096) / steps->At(512), (1 + c / 4096) / (1 + c / 512), 1e-9);

  // One global batch: its curve, no law.
  std::vector<Sample> one;
  for (const char* file : {"placements.csv", "validation-1024.csv"}) {
    auto r = ImportPath(PolluxDir() + "/cifar10/" + file, T4());
    ASSERT_TRUE(r.ok()) << r.status();
    one.insert(one.end(), r->samples.begin(), r->samples.end());
  }
  auto single = FitWorkload(one, {});
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->convergence.size(), 1u);
  EXPECT_EQ(single->convergence[0].reference_global_batch, 1024);
  EXPECT_FALSE(single->convergence[0].critical_batch.has_value());
}

// Curves made by the critical-batch law: value(j) = 1 - exp(-j / k(B)), k(B) = k0 (1 + B_crit / B),
// so the steps to a target t are -k(B) ln(1 - t). The fit finds B_crit again, and each left-out
// batch's steps.
std::vector<BatchRun> LawCurves(double critical, const std::vector<double>& batches) {
  std::vector<BatchRun> out;
  for (double b : batches) {
    BatchRun r;
    r.global_batch = b;
    r.run.job = absl::StrCat("validation-", b);
    const double k = 1000 * (1 + critical / b);
    for (double j = 0; j <= 12 * k; j += k / 200) r.run.points.push_back({j, 1 - std::exp(-j / k)});
    out.push_back(std::move(r));
  }
  return out;
}

TEST(BatchScaling, FindsTheCriticalBatchAndPredictsALeftOutBatch) {
  const auto runs = LawCurves(300, {32, 64, 128, 256, 512, 1024, 2048});
  const std::vector<double> targets = {0.5, 0.8, 0.9};
  auto fit = FitBatchScaling(runs, targets, /*higher_is_better=*/true);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->critical_batch, 300, 3);
  ASSERT_TRUE(fit->StepsAt(1, 100).has_value());
  EXPECT_NEAR(*fit->StepsAt(1, 100), -1000 * (1 + 300 / 100.0) * std::log(0.2), 20);
  auto v = ValidateBatchScaling(runs, targets, true);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->checks.size(), 7u * 3u);
  EXPECT_EQ(v->compared, 21);
  EXPECT_LT(v->mape, 1);
  // Too few batches, or no targets, are refused.
  EXPECT_EQ(ValidateBatchScaling(LawCurves(300, {32, 64}), targets, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FitBatchScaling(runs, {}, true).status().code(), absl::StatusCode::kInvalidArgument);
  // A target no batch reaches is in no check.
  auto never = ValidateBatchScaling(runs, {2.0}, true);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->compared, 0);
}

// The measured figure on Pollux's validation curves: each model's global batches left out in
// turn, steps to two or three targets each. Printed (docs/synchronous-allreduce.md quotes it)
// beside two simpler rules; the law must do better than taking the steps as independent of the
// batch (the fixed-batch assumption).
TEST(BatchScaling, LeaveOneBatchOutOnThePolluxCurves) {
  if (!std::filesystem::exists(PolluxDir() + "/cifar10/placements.csv")) {
    GTEST_SKIP() << "no Pollux traces";
  }
  struct Model {
    std::string name;
    bool higher;
    std::vector<double> targets;
  };
  const std::vector<Model> models = {
      {"cifar10", true, {0.8, 0.9, 0.93}}, {"imagenet", true, {0.5, 0.7, 0.75}},
      {"bert", true, {87.5, 88.0}},        {"deepspeech2", false, {40, 30, 25}},
      {"yolov3", false, {15, 13, 12.3}},   {"ncf", true, {0.66, 0.68, 0.69}}};
  double law = 0, fixed = 0, linear_total = 0;
  for (const Model& m : models) {
    auto imported = ImportPath(PolluxDir() + "/" + m.name, T4());
    ASSERT_TRUE(imported.ok()) << imported.status();
    const auto runs = BatchRunsOf(imported->samples, "validation");
    ASSERT_GE(runs.size(), 6u) << m.name;
    auto v = ValidateBatchScaling(runs, m.targets, m.higher);
    ASSERT_TRUE(v.ok()) << m.name << ": " << v.status();
    ASSERT_GT(v->compared, 0) << m.name;
    // The same checks predicted as the median steps of the other batches.
    // And as the median samples of the other batches (steps inversely proportional to the batch).
    double naive = 0, samples = 0;
    int n = 0;
    for (const BatchCheck& c : v->checks) {
      if (!c.observed || !c.predicted) continue;
      std::vector<double> others, others_samples;
      for (const BatchCheck& o : v->checks) {
        if (o.target == c.target && o.global_batch != c.global_batch && o.observed) {
          others.push_back(*o.observed);
          others_samples.push_back(*o.observed * o.global_batch);
        }
      }
      std::sort(others.begin(), others.end());
      std::sort(others_samples.begin(), others_samples.end());
      const double median = others[others.size() / 2];
      const double linear = others_samples[others_samples.size() / 2] / c.global_batch;
      naive += std::fabs(median - *c.observed) / *c.observed * 100;
      samples += std::fabs(linear - *c.observed) / *c.observed * 100;
      ++n;
    }
    naive /= n;
    samples /= n;
    std::printf(
        "%-12s leave-one-batch-out MAPE %.1f%% over %d checks (steps independent of the "
        "batch: %.1f%%, inversely proportional: %.1f%%)\n",
        m.name.c_str(), v->mape, v->compared, naive, samples);
    law += v->mape / models.size();
    fixed += naive / models.size();
    linear_total += samples / models.size();
  }
  std::printf(
      "average      %.1f%% (steps independent of the batch: %.1f%%, inversely "
      "proportional: %.1f%%)\n",
      law, fixed, linear_total);
  EXPECT_LT(law, fixed);
}

}  // namespace
}  // namespace spotdnn::profiler
