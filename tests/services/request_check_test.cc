// The edge check every handler runs (request_check.h) and the text helpers its errors use
// (limits.h).
#include "services/common/request_check.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/convert.h"
#include "services/common/limits.h"
#include "spotdnn/v1/predictor.pb.h"
#include "spotdnn/v1/profiler.pb.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;

TEST(ValidUtf8, ReplacesInvalidBytesAndCutsAtACharacter) {
  EXPECT_EQ(limits::ValidUtf8("plain"), "plain");
  EXPECT_EQ(limits::ValidUtf8("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");  // "été"
  EXPECT_EQ(limits::ValidUtf8("a\xff"
                              "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(limits::ValidUtf8("\xed\xa0\x80"),
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");                     // surrogate
  EXPECT_EQ(limits::ValidUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
  EXPECT_EQ(limits::ValidUtf8("abcdef", 6), "abcdef");
  EXPECT_EQ(limits::ValidUtf8("abcdefg", 6), "abc\xe2\x80\xa6");
  // Never cuts a character in two, and stays within the limit.
  const std::string cut = limits::ValidUtf8("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 6);
  EXPECT_EQ(cut, "\xc3\xa9\xe2\x80\xa6");
  EXPECT_LE(cut.size(), 6u);
}

TEST(Quote, QuotesAShortPrefixAndTheLength) {
  EXPECT_EQ(limits::Quote("p2.xlarge"), "\"p2.xlarge\"");
  const std::string quoted = limits::Quote(std::string(8000, 'c'));
  EXPECT_THAT(quoted, HasSubstr("\xe2\x80\xa6\" (8000 bytes)"));
  EXPECT_LT(quoted.size(), 80u);
  EXPECT_EQ(limits::BoundedKey("short"), "short");
  const std::string key = limits::BoundedKey(std::string(1000, 'k') + "a");
  EXPECT_LE(key.size(), limits::kMaxNameBytes);
  EXPECT_NE(key, limits::BoundedKey(std::string(1000, 'k') + "b"));
  EXPECT_EQ(key, limits::BoundedKey(std::string(1000, 'k') + "a"));
}

TEST(CheckRequest, NamesTheFieldOfAStringOverItsLimit) {
  v1::PlanRequest r;
  r.mutable_workload()->set_name("resnet110");
  EXPECT_TRUE(CheckRequest(r).ok());
  r.mutable_options()->add_quota_overrides()->set_instance_type("a");
  r.mutable_options()->add_quota_overrides()->set_instance_type(std::string(257, 'x'));
  const absl::Status s = CheckRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("options.quota_overrides[1].instance_type = \"xxx"));
  EXPECT_THAT(s.message(), HasSubstr("(257 bytes): longer than 256 bytes"));
  // Free text and paths get more room.
  v1::PredictRequest p;
  p.mutable_catalog()->mutable_catalog()->set_description(std::string(1024, 'd'));
  EXPECT_TRUE(CheckRequest(p).ok());
  p.mutable_catalog()->mutable_catalog()->set_description(std::string(1025, 'd'));
  EXPECT_THAT(CheckRequest(p).message(), HasSubstr("catalog.catalog.description"));
  v1::ImportLogRequest i;
  i.set_path("/" + std::string(1000, 'p'));
  i.set_content(std::string(100000, 'c'));  // bytes: the handler's to bound
  EXPECT_TRUE(CheckRequest(i).ok());
}

TEST(CheckRequest, RefusesUnknownEnumValuesListingTheKnownOnes) {
  v1::PlanRequest r;
  r.set_mode(static_cast<v1::PlanMode>(99));
  EXPECT_EQ(CheckRequest(r).message(),
            "mode = 99: not a spotdnn.v1.PlanMode value; expected deadline, budget");
  r.set_mode(v1::PLAN_MODE_BUDGET);
  r.mutable_workload()->mutable_profile()->set_model_variant(static_cast<v1::ModelVariant>(-3));
  EXPECT_THAT(CheckRequest(r).message(),
              HasSubstr("workload.profile.model_variant = -3: not a spotdnn.v1.ModelVariant"));
}

TEST(CheckRequest, RefusesNonFiniteNumbersAndLongRepeatedFields) {
  v1::FitProfileRequest f;
  f.mutable_base()->mutable_loss()->set_g3(std::numeric_limits<double>::infinity());
  EXPECT_EQ(CheckRequest(f).message(), "base.loss.g3 = inf: must be a finite number");
  f.mutable_base()->mutable_loss()->set_g3(1);
  for (size_t i = 0; i <= limits::kMaxRepeatedEntries; ++i) f.add_job_ids("j");
  EXPECT_EQ(CheckRequest(f).message(), "job_ids: 10001 entries, at most 10000");
  // A field the handler checks itself is skipped; a prefix names a stream's message.
  EXPECT_TRUE(CheckRequest(f, "", {"job_ids"}).ok());
  v1::Sample s;
  s.set_loss(std::nan(""));
  EXPECT_EQ(CheckRequest(s, "samples[4]").message(),
            "samples[4].loss = nan: must be a finite number");
}

TEST(ToGrpc, CutsLongMessagesToValidUtf8) {
  const grpc::Status s = ToGrpc(absl::InvalidArgumentError(std::string(10000, 'x') + "\xff"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(s.error_message().size(), limits::kMaxStatusMessageBytes);
  EXPECT_EQ(limits::ValidUtf8(s.error_message()), s.error_message());
}

}  // namespace
}  // namespace spotdnn::services
