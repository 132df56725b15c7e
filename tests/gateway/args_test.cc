#include "services/gateway/cli/args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;

const FlagSpec kSpec{.values = {"--loss", "--cluster"}, .switches = {"--json"}};

TEST(Args, ParsesBothFlagFormsAndSwitches) {
  auto args = Args::Parse({"--loss", "0.8", "--cluster=a=1,b=2", "--json", "extra"}, kSpec);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Get("--loss"), "0.8");
  EXPECT_EQ(args->Get("--cluster"), "a=1,b=2");
  EXPECT_TRUE(args->Switch("--json"));
  EXPECT_EQ(args->positional(), std::vector<std::string>{"extra"});
  EXPECT_THAT(args->Required("--nope").status().message(),
              HasSubstr("missing required flag --nope"));
}

TEST(Args, RejectsUnknownRepeatedAndValuelessFlags) {
  EXPECT_THAT(Args::Parse({"--lose", "1"}, kSpec).status().message(), HasSubstr("--lose"));
  EXPECT_THAT(Args::Parse({"--loss", "1", "--loss", "2"}, kSpec).status().message(),
              HasSubstr("more than once"));
  EXPECT_THAT(Args::Parse({"--loss"}, kSpec).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(Args::Parse({"--json=yes"}, kSpec).status().message(), HasSubstr("takes no value"));
}

TEST(ParseNumber, NamesFlagAndValue) {
  EXPECT_EQ(*ParseNumber("--loss", "0.8"), 0.8);
  EXPECT_THAT(ParseNumber("--loss", "abc").status().message(), HasSubstr("--loss = \"abc\""));
  EXPECT_FALSE(ParseNumber("--loss", "nan").ok());
  EXPECT_FALSE(ParseNumber("--loss", "inf").ok());
  EXPECT_EQ(*ParseInt("--n", "4", 1, 10), 4);
  EXPECT_THAT(ParseInt("--n", "0", 1, 10).status().message(), HasSubstr("between 1 and 10"));
}

TEST(ParseCounts, TypeEqualsCountLists) {
  auto counts = ParseCounts("--cluster", "p2.xlarge=2, g3.8xlarge=4");
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(counts->size(), 2u);
  EXPECT_EQ((*counts)[1].first, "g3.8xlarge");
  EXPECT_EQ((*counts)[1].second, 4);
  EXPECT_THAT(ParseCounts("--cluster", "p2.xlarge").status().message(), HasSubstr("TYPE=COUNT"));
  EXPECT_THAT(ParseCounts("--cluster", "a=x").status().message(), HasSubstr("count \"x\""));
  EXPECT_THAT(ParseCounts("--cluster", "a=-1").status().message(), HasSubstr("must be >= 0"));
  EXPECT_THAT(ParseCounts("--cluster", "a=1,a=2").status().message(), HasSubstr("more than once"));
  EXPECT_FALSE(ParseCounts("--cluster", "").ok());
}

TEST(ParseDuration, AcceptsSecondsMinutesHours) {
  EXPECT_EQ(*ParseDuration("--deadline", "2400"), 2400);
  EXPECT_EQ(*ParseDuration("--deadline", "2400s"), 2400);
  EXPECT_EQ(*ParseDuration("--deadline", "40m"), 2400);
  EXPECT_EQ(*ParseDuration("--deadline", "1.5h"), 5400);
  EXPECT_EQ(*ParseDuration("--deadline", "1h30m"), 5400);
  for (const char* bad : {"", "abc", "10x", "-5", "0", "1h30", "h"}) {
    auto d = ParseDuration("--deadline", bad);
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("--deadline")) << bad;
  }
}

}  // namespace
}  // namespace spotdnn::gateway
