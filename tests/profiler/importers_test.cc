// The log importers on real CM-DARE exports and on hand-made broken files.
#include "profiler/importers.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/fitting.h"

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

}  // namespace
}  // namespace spotdnn::profiler
