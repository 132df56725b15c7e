// The log importers on real CM-DARE exports and on hand-made broken files.
#include "profiler/importers.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/cluster_fit.h"
#include "profiler/fitting.h"
#include "profiler/speed_curve.h"

namespace spotdnn::profiler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string DataDir() {
  if (const char* env = std::getenv("SPOTDNN_DATA_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return SPOTDNN_DATA_DIR;
}

std::string CmdareDir() { return DataDir() + "/cmdare"; }

#define SKIP_WITHOUT_CMDARE()                                            \
  if (!std::filesystem::exists(CmdareDir() + "/k80")) {                  \
    GTEST_SKIP() << "CM-DARE data not found at " << CmdareDir()          \
                 << " (set SPOTDNN_DATA_DIR to the shared/data folder)"; \
  }

TEST(TensorBoardImport, ReadsARealRunFolderFile) {
  SKIP_WITHOUT_CMDARE();
  const std::string path = CmdareDir() + "/k80/res15k80worker1/run_.-tag-global_step_sec.csv";
  auto result = ImportPath(path, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->skipped, 0u);
  ASSERT_EQ(result->samples.size(), 99u);  // 100 lines, one header
  const Sample& first = result->samples.front();
  EXPECT_EQ(first.job_id, "res15k80worker1");
  EXPECT_EQ(first.cluster_workers, 1);
  EXPECT_EQ(first.step, 101);
  EXPECT_DOUBLE_EQ(first.wall_time_s, 1568069781.16013);
  EXPECT_DOUBLE_EQ(first.cluster_steps_per_s, 8.58333969116211);
}

TEST(TensorBoardImport, ReadsEveryRunOfTheK80FolderIntoSeries) {
  SKIP_WITHOUT_CMDARE();
  auto result = ImportPath(CmdareDir() + "/k80", {.job_id = "cmdare"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files, 32);
  EXPECT_EQ(result->skipped, 0u);
  EXPECT_EQ(result->samples.size(), 1838u);
  const std::vector<SpeedSeries> series = SpeedSeriesFromSamples(result->samples);
  ASSERT_EQ(series.size(), 4u);
  EXPECT_EQ(series[0].name, "cmdare/res15k80");
  ASSERT_EQ(series[0].runs.size(), 8u);
  for (int n = 1; n <= 8; ++n) EXPECT_EQ(series[0].runs[n - 1].workers, n);
  // Median speed of the 1-worker ResNet-15 run on K80 (global steps/s).
  EXPECT_NEAR(series[0].runs[0].Observed(), 9.888, 0.01);
}

TEST(TensorBoardImport, SingleWorkerExportsCarryStepTimeAndReportEmptyWallTimes) {
  SKIP_WITHOUT_CMDARE();
  const std::string path = CmdareDir() + "/single_worker/res15k80/data.csv";
  auto result = ImportPath(path, {});
  ASSERT_TRUE(result.ok()) << result.status();
  // Line 2 is ",0,0," and the file ends with two more rows without a wall time.
  EXPECT_EQ(result->skipped, 3u);
  ASSERT_FALSE(result->errors.empty());
  EXPECT_EQ(result->errors[0], path + ":2: Wall time is empty");
  ASSERT_GT(result->samples.size(), 30u);
  EXPECT_NEAR(result->samples[1].iteration_time_s, 0.104981594, 1e-9);

  auto strict = ImportPath(path, {.stop_on_error = true});
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(strict.status().message(), HasSubstr("data.csv:2: Wall time is empty"));
}

// The real single-worker export read as a plain CSV, and rewritten in the prototype's worker-log
// format and as sample lines: every importer reads the same measurements from it.
TEST(EveryImporter, ReadsTheSameRealMeasurements) {
  SKIP_WITHOUT_CMDARE();
  const std::string path = CmdareDir() + "/single_worker/res32p100/data.csv";
  auto tensorboard = ImportPath(path, {.job_id = "x"});
  ASSERT_TRUE(tensorboard.ok()) << tensorboard.status();
  ASSERT_GT(tensorboard->samples.size(), 30u);
  auto csv = ImportPath(path, {.format = LogFormat::kCsv, .job_id = "x"});
  ASSERT_TRUE(csv.ok()) << csv.status();

  std::string worker_log = "datetime\tglobal step\timages\tloss\texamples/s\ts/batch\n";
  std::string sample_lines;
  for (const Sample& s : tensorboard->samples) {
    const absl::Time t = absl::FromUnixMicros(static_cast<int64_t>(s.wall_time_s * 1e6));
    worker_log += absl::StrFormat("%s\t%d\t128\t0\t%.6f\t%.9f\n",
                                  absl::FormatTime("%Y-%m-%d %H:%M:%E6S", t, absl::UTCTimeZone()),
                                  s.step, 128 * s.cluster_steps_per_s, s.iteration_time_s);
    sample_lines += absl::StrFormat(
        "INFO SPOTDNN_SAMPLE job_id=x step=%d wall_time_s=%.6f iteration_time_s=%.9f "
        "cluster_steps_per_s=%.9f\n",
        s.step, s.wall_time_s, s.iteration_time_s, s.cluster_steps_per_s);
  }
  auto worker = ImportText(worker_log, "worker.log", {.job_id = "x"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto lines = ImportText(sample_lines, "train.log", {});
  ASSERT_TRUE(lines.ok()) << lines.status();
  for (const ImportResult* r : {&*csv, &*worker, &*lines}) {
    // The CSV reader skips the same rows without measurements as the TensorBoard reader.
    EXPECT_EQ(r->skipped, r == &*csv ? tensorboard->skipped : 0u);
    ASSERT_EQ(r->samples.size(), tensorboard->samples.size());
    for (size_t i = 0; i < r->samples.size(); ++i) {
      const Sample &a = tensorboard->samples[i], &b = r->samples[i];
      EXPECT_EQ(b.job_id, "x");
      EXPECT_EQ(b.step, a.step);
      EXPECT_NEAR(b.wall_time_s, a.wall_time_s, 1e-5);
      EXPECT_NEAR(b.iteration_time_s, a.iteration_time_s, 1e-9);
    }
  }
  EXPECT_EQ(worker->samples[0].batch_size, 128);
}

constexpr char kBrokenTensorBoard[] =
    "Wall time,Step,Value\n"
    "1568069781.1,101,8.5\n"
    "1568069791.1,201,nan\n"
    "1568069801.1,301,inf\n"
    "-5,401,8.5\n"
    "1568069821.1,51,8.5\n"
    "1568069831.1,501\n"
    "1568069841.1,abc,8.5\n"
    "1568069851.1,601,8.7\n";

TEST(TensorBoardImport, ReportsEveryBrokenLineWithItsNumberAndReason) {
  auto result = ImportText(kBrokenTensorBoard, "broken.csv", {.job_id = "j"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->skipped, 6u);
  ASSERT_EQ(result->samples.size(), 2u);
  EXPECT_EQ(result->samples[1].step, 601);
  EXPECT_THAT(result->errors, ElementsAre("broken.csv:3: cluster_steps_per_s = nan: must be finite",
                                          "broken.csv:4: cluster_steps_per_s = inf: must be finite",
                                          "broken.csv:5: wall_time_s = -5: must not be negative",
                                          "broken.csv:6: step = 51: goes backwards (the previous "
                                          "sample of job \"j\" worker \"\" was step 101)",
                                          "broken.csv:7: expected 3 comma-separated fields, got 2",
                                          "broken.csv:8: Step = \"abc\": not a number"));
}

TEST(TensorBoardImport, StopOnErrorFailsAtTheFirstBadLine) {
  auto result = ImportText(kBrokenTensorBoard, "broken.csv", {.stop_on_error = true});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "broken.csv:3: cluster_steps_per_s = nan: must be finite");
}

TEST(TensorBoardImport, RejectsAHeaderWithoutTheColumns) {
  auto result =
      ImportText("Wall time,Steps\n1,2\n", "bad.csv", {.format = LogFormat::kTensorBoardCsv});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("bad.csv:1: header"));
}

TEST(SpotdnnWorkerImport, ReadsTabSeparatedLinesAndSkipsTheHeader) {
  const std::string log =
      "datetime\tglobal step\timages\tloss\texamples/s\ts/batch\n"
      "2023-01-05 10:00:01.500\t100\t1024\t4.25\t1885.2\t0.5432\n"
      "2023-01-05 10:00:02.000\t101\t1024\t4.20\t1890.0\t0.5418\n"
      "2023-01-05 10:00:03\t102\t1024\tnan\t1890.0\t0.5418\n"
      "2023-01-05 10:00:04\t103\t1024\n"
      "yesterday\t104\t1024\t4.1\t1890.0\t0.5\n";
  auto result = ImportText(log, "worker0.log",
                           {.job_id = "proto", .instance_type = "p2.xlarge", .cluster_workers = 1});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->samples.size(), 2u);
  const Sample& s = result->samples[0];
  EXPECT_EQ(s.step, 100);
  EXPECT_EQ(s.batch_size, 1024);
  EXPECT_DOUBLE_EQ(s.loss, 4.25);
  EXPECT_DOUBLE_EQ(s.iteration_time_s, 0.5432);
  EXPECT_DOUBLE_EQ(s.wall_time_s, 1672912801.5);  // 2023-01-05T10:00:01.5Z
  EXPECT_EQ(s.instance_type, "p2.xlarge");
  EXPECT_EQ(result->skipped, 3u);
  EXPECT_THAT(result->errors, ElementsAre("worker0.log:4: loss = nan: must be finite",
                                          HasSubstr("worker0.log:5: expected 6 tab-separated"),
                                          HasSubstr("worker0.log:6: datetime = \"yesterday\"")));
}

TEST(CsvImport, MapsNamedColumnsAndIgnoresOthers) {
  const std::string csv =
      "job_id,worker_id,step,iteration_time_s,batch_size,loss,comment,bytes_sent\n"
      "a,w0,1,0.5,128,2.5,warm-up,1000\n"
      "a,w0,2,0.4,128,2.4,,1000\n"
      "a,w0,3,-0.4,128,2.3,,1000\n"
      "a,w0,4,0.4,128\n";
  auto result = ImportText(csv, "runs.csv", {});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->samples.size(), 2u);
  EXPECT_EQ(result->samples[1].job_id, "a");
  EXPECT_EQ(result->samples[1].worker_id, "w0");
  EXPECT_DOUBLE_EQ(result->samples[1].iteration_time_s, 0.4);
  EXPECT_EQ(result->samples[1].bytes_sent, 1000);
  EXPECT_THAT(result->errors,
              ElementsAre("runs.csv:4: iteration_time_s = -0.4: must not be negative",
                          HasSubstr("runs.csv:5: expected 8 comma-separated fields")));
}

// A quoted field is shown as written: `loss = "x"`, not `loss = ""x""`.
TEST(CsvImport, AQuotedValueIsShownInOnePairOfQuotes) {
  auto result = ImportText("job_id,step,loss,batch_size\na,1,\"x\",2\na,2,2.4,\"y\"\n", "runs.csv",
                           {.format = LogFormat::kCsv});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->errors, ElementsAre("runs.csv:2: loss = \"x\": not a number",
                                          "runs.csv:3: batch_size = \"y\": not a number"));
}

TEST(CsvImport, RejectsAHeaderThatNamesNoField) {
  auto result = ImportText("a,b,c\n1,2,3\n", "x.csv", {.format = LogFormat::kCsv});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("x.csv:1: header \"a,b,c\": names no sample"));
}

TEST(SampleLineImport, FindsMarkedLinesInsideAnyLog) {
  const std::string log =
      "INFO 12:00:00 starting training\n"
      "INFO 12:00:01 SPOTDNN_SAMPLE job_id=r110 worker_id=0 step=10 iteration_time_s=0.54 "
      "batch_size=128 loss=4.1 bytes_sent=11540000 bytes_received=11540000 cluster_workers=2\n"
      "something else\n"
      "SPOTDNN_SAMPLE job_id=r110 worker_id=0 step=11 iteration_time_s=0.55 colour=blue\n"
      "SPOTDNN_SAMPLE job_id=r110 worker_id=0 step=12 iteration_time_s\n"
      "SPOTDNN_SAMPLE job_id=r110 worker_id=0 step=13 iteration_time_s=0.53\n";
  auto result = ImportText(log, "train.log", {});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->samples.size(), 2u);
  EXPECT_EQ(result->samples[0].bytes_sent, 11540000);
  EXPECT_EQ(result->samples[0].cluster_workers, 2);
  EXPECT_EQ(result->samples[1].step, 13);
  EXPECT_THAT(result->errors, ElementsAre("train.log:4: unknown field \"colour\"",
                                          HasSubstr("train.log:5: \"iteration_time_s\"")));
}

// Accuracy and any metric, in sample lines (metric.NAME=V) and CSV columns (metric.NAME).
TEST(SampleLineImport, ReadsAccuracyAndNamedMetrics) {
  const std::string log =
      "SPOTDNN_SAMPLE job_id=r step=100 loss=1.2 accuracy=0.9 metric.top5=0.97 "
      "metric.eval/BLEU=27.5\n"
      "SPOTDNN_SAMPLE job_id=r step=200 metric.top5=inf\n"
      "SPOTDNN_SAMPLE job_id=r step=300 metric.top5=x\n"
      "SPOTDNN_SAMPLE job_id=r step=400 metric.=1\n"
      "SPOTDNN_SAMPLE job_id=r step=500 metric.top5=0.98\n";
  auto result = ImportText(log, "train.log", {});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->samples.size(), 2u);
  const Sample& s = result->samples[0];
  EXPECT_DOUBLE_EQ(s.accuracy, 0.9);
  EXPECT_DOUBLE_EQ(s.loss, 1.2);
  EXPECT_THAT(s.metrics, ::testing::UnorderedElementsAre(::testing::Pair("top5", 0.97),
                                                         ::testing::Pair("eval/BLEU", 27.5)));
  // A sample with only a metric is a measurement.
  EXPECT_THAT(result->samples[1].metrics, ::testing::ElementsAre(::testing::Pair("top5", 0.98)));
  EXPECT_THAT(result->errors,
              ElementsAre("train.log:2: metric.top5 = inf: must be a finite number",
                          "train.log:3: metric.top5 = \"x\": not a number",
                          HasSubstr("train.log:4: metric.\"\": a metric's name is 1 to 128")));
}

TEST(CsvImport, ReadsMetricColumns) {
  const std::string csv =
      "job_id,step,accuracy,metric.top5,metric.loss_eval\n"
      "a,1,0.5,0.8,2.5\n"
      "a,2,0.6,,2.4\n";
  auto result = ImportText(csv, "runs.csv", {.format = LogFormat::kCsv});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(result->samples[0].accuracy, 0.5);
  EXPECT_THAT(result->samples[0].metrics,
              ::testing::UnorderedElementsAre(::testing::Pair("top5", 0.8),
                                              ::testing::Pair("loss_eval", 2.5)));
  // An empty cell leaves the metric out of that sample.
  EXPECT_THAT(result->samples[1].metrics,
              ::testing::ElementsAre(::testing::Pair("loss_eval", 2.4)));
}

TEST(TensorBoardImport, AnExportOfAnAccuracyOrMetricTagSetsThatField) {
  const std::string csv = "Wall time,Step,Value\n1600000000,100,0.5\n1600000010,200,0.6\n";
  auto accuracy = ImportText(csv, "logs/run-train-tag-eval_accuracy.csv", {.job_id = "j"});
  ASSERT_TRUE(accuracy.ok()) << accuracy.status();
  ASSERT_EQ(accuracy->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(accuracy->samples[1].accuracy, 0.6);
  EXPECT_EQ(accuracy->samples[1].cluster_steps_per_s, 0);
  auto loss = ImportText(csv, "run_.-tag-loss.csv", {.job_id = "j"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_DOUBLE_EQ(loss->samples[0].loss, 0.5);
  auto top5 = ImportText(csv, "run_.-tag-top5.csv", {.job_id = "j"});
  ASSERT_TRUE(top5.ok()) << top5.status();
  EXPECT_THAT(top5->samples[0].metrics, ElementsAre(::testing::Pair("top5", 0.5)));
  // The speed export (and a file whose name names no tag) as before.
  for (const char* name : {"run_.-tag-global_step_sec.csv", "speed.csv"}) {
    auto speed = ImportText(csv, name, {.format = LogFormat::kTensorBoardCsv, .job_id = "j"});
    ASSERT_TRUE(speed.ok()) << speed.status();
    EXPECT_DOUBLE_EQ(speed->samples[0].cluster_steps_per_s, 0.5) << name;
    EXPECT_TRUE(speed->samples[0].metrics.empty()) << name;
  }
}

TEST(ValidateSample, ChecksMetricNamesAndValues) {
  Sample s;
  s.step = 1;
  s.metrics["top5"] = 0.9;
  EXPECT_TRUE(ValidateSample(s).ok());
  s.metrics["top5"] = -2.5;  // a metric may be negative (a log-likelihood)
  EXPECT_TRUE(ValidateSample(s).ok());
  s.metrics["top5"] = std::nan("");
  EXPECT_THAT(std::string(ValidateSample(s).message()),
              HasSubstr("metric.top5 = nan: must be finite"));
  s.metrics.clear();
  s.metrics["bad name"] = 1;
  EXPECT_THAT(std::string(ValidateSample(s).message()),
              HasSubstr("metric.\"bad name\": a metric's name is 1 to 128"));
  s.metrics.clear();
  for (int i = 0; i <= static_cast<int>(kMaxSampleMetrics); ++i) {
    s.metrics["m" + std::to_string(i)] = i;
  }
  EXPECT_THAT(std::string(ValidateSample(s).message()), HasSubstr("metrics: 65 given, at most 64"));
}

TEST(ParseSampleLine, OneLineOfTheSampleFormat) {
  auto none = ParseSampleLine("epoch 3: loss 2.1");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto line = ParseSampleLine(
      "2026-11-23 12:00:00 INFO SPOTDNN_SAMPLE job_id=j worker=3 step=42\tloss=1.5 "
      "iteration_time_s=0.2\r");
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_TRUE(line->has_value());
  EXPECT_EQ((*line)->job_id, "j");
  EXPECT_EQ((*line)->worker_id, "3");
  EXPECT_EQ((*line)->step, 42);
  EXPECT_DOUBLE_EQ((*line)->loss, 1.5);
  EXPECT_DOUBLE_EQ((*line)->iteration_time_s, 0.2);
  auto bad = ParseSampleLine("SPOTDNN_SAMPLE step=1 =3");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"=3\": expected key=value"));
  auto unknown = ParseSampleLine("SPOTDNN_SAMPLE colour=blue");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("colour"));
  // Not validated here: a negative loss parses (ValidateSample refuses it).
  EXPECT_TRUE(ParseSampleLine("SPOTDNN_SAMPLE loss=-1").ok());
}

TEST(ImportPath, NamesAMissingPath) {
  auto result = ImportPath("/no/such/folder", {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("/no/such/folder"));
}

TEST(LogFormat, ParsesItsNames) {
  for (LogFormat f : {LogFormat::kAuto, LogFormat::kTensorBoardCsv, LogFormat::kSpotdnnWorker,
                      LogFormat::kCsv, LogFormat::kSampleLines}) {
    auto parsed = ParseLogFormat(LogFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(ParseLogFormat("xml").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunFolderName, SplitsSeriesAndWorkers) {
  std::string series;
  int workers = 0;
  ASSERT_TRUE(ParseRunFolderName("shakebig100worker7", &series, &workers));
  EXPECT_EQ(series, "shakebig100");
  EXPECT_EQ(workers, 7);
  EXPECT_FALSE(ParseRunFolderName("single_worker", &series, &workers));
  EXPECT_FALSE(ParseRunFolderName("worker3", &series, &workers));
  EXPECT_FALSE(ParseRunFolderName("resworker0", &series, &workers));
}

// ---- Checkpoint exports: Wall Time,Step,SCALAR[,Zone][,Run] ----

std::string IcacDir() { return DataDir() + "/icac2019"; }

#define SKIP_WITHOUT_ICAC()                                                                   \
  if (!std::filesystem::exists(IcacDir())) {                                                  \
    GTEST_SKIP() << "ICAC 2019 data not found at " << IcacDir() << " (set SPOTDNN_DATA_DIR)"; \
  }

TEST(CheckpointImport, SplitsRunsAndTakesTheSpeedFromStepsAndWallTimes) {
  const std::string csv =
      "Wall Time,Step,Accuracy,Zone,Run\r\n"
      "1000,0,0.1,us-east1-c,1\r\n"
      "1100,4000,0.5,us-east1-c,1\r\n"
      "1300,8000,0.7,us-east1-c,1\r\n"
      "5000,0,0.1,us-west1-b,1\r\n"
      "5200,4000,0.6,us-west1-b,1\r\n";
  auto result = ImportText(
      csv, "train_data.csv",
      {.job_id = "k80-2", .gpu_type = "K80", .cluster_workers = 2, .parameter_servers = 1});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->skipped, 0u);
  ASSERT_EQ(result->samples.size(), 5u);
  const Sample& first = result->samples[0];
  EXPECT_EQ(first.job_id, "k80-2/us-east1-c/run-1");
  EXPECT_EQ(result->samples[3].job_id, "k80-2/us-west1-b/run-1");
  EXPECT_EQ(first.gpu_type, "K80");
  EXPECT_EQ(first.cluster_workers, 2);
  EXPECT_EQ(first.parameter_servers, 1);
  EXPECT_DOUBLE_EQ(first.accuracy, 0.1);
  EXPECT_EQ(first.cluster_steps_per_s, 0);  // no speed before the second checkpoint
  EXPECT_DOUBLE_EQ(result->samples[1].cluster_steps_per_s, 40);
  EXPECT_DOUBLE_EQ(result->samples[2].cluster_steps_per_s, 20);
  EXPECT_DOUBLE_EQ(result->samples[2].accuracy, 0.7);
  // The run's speed is its span: 8000 steps in 300 s.
  const RunSet runs = RunsFromSamples(result->samples);
  ASSERT_EQ(runs.runs.size(), 2u);
  EXPECT_NEAR(runs.runs[0].steps_per_s, 8000.0 / 300, 1e-12);
  // Without a Run column the file is one run of the given job; a Loss column is kept too.
  auto one = ImportText("Wall Time,Step,Loss\n10,0,2.5\n20,100,2.0\n", "x.csv", {.job_id = "j"});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->samples.size(), 2u);
  EXPECT_EQ(one->samples[0].job_id, "j");
  EXPECT_DOUBLE_EQ(one->samples[1].loss, 2.0);
}

TEST(CheckpointImport, ReportsFilesWithoutAUsableSpeedWithFileAndLine) {
  const std::string csv =
      "Wall Time,Step,Accuracy,Run\n"
      "100,0,0.1,1\n"  // run 1: one checkpoint only
      "200,0,0.1,2\n"  // run 2: a restart at line 5, wall time back at line 6
      "300,4000,0.5,2\n"
      "400,0,0.1,2\n"
      "350,4500,0.5,2\n"
      "500,4000,0.6,2\n"
      "600,x,0.6,2\n";
  auto result = ImportText(csv, "runs.csv", {.job_id = "j"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->errors,
              ElementsAre(HasSubstr("runs.csv:8: Step = \"x\": not a number"),
                          HasSubstr("runs.csv:2: run 1 has 1 usable checkpoint(s): a speed needs "
                                    "at least two"),
                          HasSubstr("runs.csv:5: Step 0 does not increase (line 4 has step 4000): "
                                    "run 2 restarted here; its 2 earlier checkpoint(s) are left "
                                    "out"),
                          HasSubstr("runs.csv:6: Wall Time 350.000000 goes backwards")));
  ASSERT_EQ(result->samples.size(), 2u);  // run 2 from its restart: lines 5 and 7
  EXPECT_EQ(result->samples[0].job_id, "j/run-2");
  EXPECT_DOUBLE_EQ(result->samples[1].cluster_steps_per_s, 40);
  // With --stop-on-error the first problem stops the import.
  auto strict = ImportText(csv, "runs.csv", {.job_id = "j", .stop_on_error = true});
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(strict.status().message(), HasSubstr("runs.csv:8:"));
}

TEST(CheckpointImport, AGivenValueTheFileContradictsIsAnErrorNamingBoth) {
  auto csv = ImportText("step,wall_time_s,gpu_type\n1,10,P100\n", "x.csv",
                        {.job_id = "j", .gpu_type = "V100"});
  ASSERT_TRUE(csv.ok());
  EXPECT_THAT(csv->errors, ElementsAre("x.csv:2: given gpu_type = V100 contradicts the file's "
                                       "gpu_type = P100"));
  // A run folder's name says the workers, servers and GPU of its runs.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("spotdnn-import-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "2ps4k");
  std::ofstream(dir / "2ps4k" / "train_data.csv")
      << "Wall Time,Step,Accuracy,Run\n0,0,0.1,1\n100,2000,0.4,1\n";
  auto fine = ImportPath((dir / "2ps4k" / "train_data.csv").string(), {.job_id = "k"});
  ASSERT_TRUE(fine.ok()) << fine.status();
  ASSERT_EQ(fine->samples.size(), 2u);
  EXPECT_EQ(fine->samples[0].cluster_workers, 4);
  EXPECT_EQ(fine->samples[0].parameter_servers, 2);
  EXPECT_EQ(fine->samples[0].gpu_type, "K80");
  auto wrong = ImportPath((dir / "2ps4k" / "train_data.csv").string(),
                          {.job_id = "k", .cluster_workers = 8});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("given cluster_workers = 8 contradicts the run folder \"2ps4k\" (4 "
                        "workers)"));
  auto gpu = ImportPath(dir.string(), {.job_id = "k", .gpu_type = "V100"});
  EXPECT_THAT(gpu.status().message(), HasSubstr("given gpu_type = V100 contradicts"));
  std::filesystem::remove_all(dir);
  FolderContext context;
  EXPECT_TRUE(ParseFolderContext("1ps8v", &context));
  EXPECT_EQ(context.gpu_type, "V100");
  EXPECT_FALSE(ParseFolderContext("1ps_k80", &context));
  EXPECT_FALSE(ParseFolderContext("experiment_1ps_vs_2ps", &context));
}

TEST(CheckpointImport, RealFilesSplitIntoRunsAndRestartsAreHandled) {
  SKIP_WITHOUT_ICAC();
  auto v100 = ImportPath(IcacDir() + "/experiment_1ps_vs_2ps/1ps4v/train_data.csv",
                         {.job_id = "v100-4", .instance_type = "gce-v100"});
  ASSERT_TRUE(v100.ok()) << v100.status();
  EXPECT_EQ(v100->skipped, 0u);
  EXPECT_EQ(v100->samples.size(), 85u);  // 5 runs of 17 checkpoints
  EXPECT_EQ(v100->samples.back().job_id, "v100-4/run-5");
  EXPECT_EQ(v100->samples.back().cluster_workers, 4);  // from the folder's name
  EXPECT_EQ(v100->samples.back().gpu_type, "V100");
  const RunSet runs = RunsFromSamples(v100->samples);
  ASSERT_EQ(runs.runs.size(), 5u);
  // The speed matches the run's Duration in train_data_processed.csv: 64004 steps in 1590.78 s.
  EXPECT_NEAR(runs.runs[0].steps_per_s, 64004 / 1590.776843, 1e-3);
  EXPECT_NEAR(runs.runs[0].duration_s, 1590.776843, 0.01);
  // 2ps5k run 1 restarted from step 0: its Duration (2691 s) counts from the restart.
  auto k80 =
      ImportPath(IcacDir() + "/experiment_1ps_vs_2ps/2ps5k/train_data.csv", {.job_id = "k80-5"});
  ASSERT_TRUE(k80.ok());
  EXPECT_EQ(k80->skipped, 1u);
  ASSERT_EQ(k80->errors.size(), 1u);
  EXPECT_THAT(k80->errors[0], HasSubstr("2ps5k/train_data.csv:3: Step 0 does not increase"));
  EXPECT_NEAR(RunsFromSamples(k80->samples).runs[0].duration_s, 2691, 1e-9);
}

TEST(CheckpointImport, RunsThatLostAWorkerAreLeftOutAndSideFilesAreNotSamples) {
  SKIP_WITHOUT_ICAC();
  auto spot = ImportPath(IcacDir() + "/k80_spot/2-spot",
                         {.job_id = "spot", .gpu_type = "K80", .cluster_workers = 2});
  ASSERT_TRUE(spot.ok()) << spot.status();
  EXPECT_EQ(spot->files, 5);
  std::set<std::string> jobs;
  for (const Sample& s : spot->samples) jobs.insert(s.job_id);
  EXPECT_EQ(jobs.size(), 26u);  // 32 runs, 6 lost their worker mid-run
  EXPECT_EQ(jobs.count("spot/us-east1-c/run-3"), 0u);
  EXPECT_EQ(jobs.count("spot/us-east1-c/run-2"), 1u);
  int left_out = 0, side = 0;
  for (const std::string& n : spot->notes) {
    left_out += n.find("was revoked mid-run") != std::string::npos;
    side += n.find("not samples") != std::string::npos;
  }
  EXPECT_EQ(left_out, 6);
  EXPECT_EQ(side, 4);  // agg_data, cost, train_data_processed, vm_data
  EXPECT_EQ(RunsWithRevokedVms("VM_name,Uptime,Revoked\nx-run4-worker-1,10,Revoked\n"
                               "x-run5-master,9,Manually stopped due to revoked master\n",
                               "vm.csv")
                .size(),
            1u);
}

TEST(Composition, ParsesAndPrintsTypeCounts) {
  auto c = ParseComposition("gce-v100=1, gce-k80=2");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(CompositionText(*c), "gce-k80=2,gce-v100=1");
  EXPECT_EQ(ParseComposition("a=0").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseComposition("a=1,a=2").status().message(), HasSubstr("more than once"));
  Sample s;
  s.job_id = "j";
  s.wall_time_s = 1;
  s.cluster = "a=1,b=2";
  s.cluster_workers = 4;
  EXPECT_THAT(ValidateSample(s).message(), HasSubstr("cluster_workers = 4"));
}

// Compositions, and the sample fields beside them, are bounded like the others.
TEST(Composition, IsBoundedInWorkersTypesAndBytes) {
  EXPECT_TRUE(ParseComposition("a=100000").ok());
  EXPECT_THAT(ParseComposition("a=100001").status().message(),
              HasSubstr("is not TYPE=N with N in [1, 100000]"));
  EXPECT_THAT(ParseComposition("a=60000,b=60000").status().message(),
              HasSubstr("more than 100000 workers in all"));
  EXPECT_THAT(ParseComposition(std::string(300, 't') + "=1").status().message(),
              HasSubstr("type = \"tttt"));
  Sample s;
  s.job_id = "j";
  s.wall_time_s = 1;
  s.parameter_servers = 1000;
  EXPECT_TRUE(ValidateSample(s).ok());
  s.parameter_servers = 1001;
  EXPECT_EQ(ValidateSample(s).message(), "parameter_servers = 1001: must be at most 1000");
  s.parameter_servers = 1;
  s.cluster = std::string(1025, 'c');
  EXPECT_THAT(ValidateSample(s).message(), HasSubstr("(1025 bytes): longer than 1024 bytes"));
  s.cluster = "";
  s.accuracy = -1;
  EXPECT_EQ(ValidateSample(s).message(), "accuracy = -1: must not be negative");
}

}  // namespace
}  // namespace spotdnn::profiler
