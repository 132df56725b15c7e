// The local provider's capacity traces: both formats, the step function they draw, the
// Bamboo files as published, and broken files refused naming the file and line.
#include "provisioner/launcher/capacity_trace.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;

TEST(CapacityTrace, JsonTicksAreAStepFunction) {
  auto trace = ParseCapacityTrace(
      R"({"metadata": {"gap_seconds": 600, "region": "us-east-1"}, "data": [1, 1, 0, 0, 2]})",
      "t.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->CountAt(0), 1);
  EXPECT_EQ(trace->CountAt(1199), 1);
  EXPECT_EQ(trace->CountAt(1200), 0);
  EXPECT_EQ(trace->CountAt(2399.9), 0);
  EXPECT_EQ(trace->CountAt(2400), 2);
  EXPECT_EQ(trace->CountAt(1e9), 2);  // the last count holds
  EXPECT_EQ(trace->CountAt(-5), 1);
  EXPECT_EQ(trace->starts_s, (std::vector<double>{0, 1200, 2400}));
}

TEST(CapacityTrace, CsvRowsInSecondsOrHours) {
  // Bamboo's form: each change as two rows at the same time.
  auto seconds = ParseCapacityTrace("0,10\n41093,10\n41093,9\n41885,9\n41885,10\n", "s.csv");
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_EQ(seconds->CountAt(41092), 10);
  EXPECT_EQ(seconds->CountAt(41093), 9);
  EXPECT_EQ(seconds->CountAt(41885), 10);
  auto hours = ParseCapacityTrace("time_h,count\n0,1\n0.5,0\n2,1\n", "h.csv");
  ASSERT_TRUE(hours.ok()) << hours.status();
  EXPECT_EQ(hours->CountAt(1799), 1);
  EXPECT_EQ(hours->CountAt(1800), 0);
  EXPECT_EQ(hours->CountAt(7200), 1);
}

TEST(CapacityTrace, BrokenFilesAreRefusedNamingTheFileAndLine) {
  struct Case {
    std::string text, says;
  };
  for (const Case& c : std::vector<Case>{
           {"0,1\n10,x\n", "bad.csv:2: \"10,x\": expected time,count"},
           {"0,1\n10,1\n5,0\n", "bad.csv:3: \"5,0\": time goes back"},
           {"0,1\n10,-1\n", "bad.csv:2: \"10,-1\": negative count"},
           {"time,count\n", "bad.csv: no time,count rows"},
           {"", "bad.csv: no time,count rows"},
           {R"({"metadata": {"gap_seconds": 60}, "data": []})", "bad.csv: data"},
           {R"({"metadata": {"gap_seconds": 0}, "data": [1]})", "metadata.gap_seconds = 0"},
           {R"({"metadata": {}, "data": [1]})", "metadata.gap_seconds = missing"},
           {R"({"metadata": {"gap_seconds": 60}, "data": [1, -2]})", "bad.csv: data[1] = -2"},
           {R"({"metadata": {"gap_seconds": 60}, "data": [1, "a"]})", "data[1] = \"a\""},
       }) {
    auto trace = ParseCapacityTrace(c.text, "bad.csv");
    ASSERT_FALSE(trace.ok()) << c.text;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(trace.status().message(), HasSubstr(c.says)) << c.text;
  }
  auto missing = ReadCapacityTrace("/nonexistent/trace.csv");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/trace.csv"));
}

TEST(CapacityTrace, ReadsTheBambooFiles) {
  const std::string dir = std::string(SPOTDNN_DATA_DIR) + "/bamboo-spot";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  auto trace = ReadCapacityTrace(dir +
                                 "/aws-spot-instances-p2-xlarge-us-east-1e-2020-11-23-1700-to-2020-"
                                 "11-24-0700.csv");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->CountAt(0), 10);
  EXPECT_EQ(trace->CountAt(41093), 9);
  EXPECT_GT(trace->last_change_s(), 41093);
}

}  // namespace
}  // namespace spotdnn::launcher
