// The edge check every handler runs (request_check.h) and the text helpers its errors use
// (limits.h).
#include "services/common/request_check.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "base/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/convert.h"
#include "services/common/request_size.h"
#include "services/common/security.h"
#include "spotdnn/v1/detector.pb.h"
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

// The shared-ps and target fields are bounded like every other: names and compositions, enums (the
// shared-ps variant is known), finite targets.
TEST(CheckRequest, CoversTheSharedPsAndTargetFields) {
  v1::FitProfileRequest f;
  f.set_name("p");
  f.set_model_variant(v1::MODEL_VARIANT_SHARED_PS);
  f.mutable_base()->set_model_variant(v1::MODEL_VARIANT_SHARED_PS);
  f.mutable_base()->mutable_shared_ps()->set_queueing(0.5);
  EXPECT_TRUE(CheckRequest(f).ok());
  f.set_model_variant(static_cast<v1::ModelVariant>(3));
  EXPECT_EQ(CheckRequest(f).message(),
            "model_variant = 3: not a spotdnn.v1.ModelVariant value; expected paper, "
            "spotdnn-prototype, shared-ps");
  f.set_model_variant(v1::MODEL_VARIANT_PAPER);
  f.mutable_base()->mutable_shared_ps()->set_queueing(std::nan(""));
  EXPECT_EQ(CheckRequest(f).message(), "base.shared_ps.queueing = nan: must be a finite number");

  v1::ValidateProfileRequest v;
  v.add_fit_job_ids("a");
  v.add_check_job_ids(std::string(300, 'j'));
  EXPECT_THAT(CheckRequest(v).message(), HasSubstr("check_job_ids[0] = \"jjjj"));
  v.set_check_job_ids(0, "b");
  v.set_iterations(std::numeric_limits<double>::infinity());
  EXPECT_EQ(CheckRequest(v).message(), "iterations = inf: must be a finite number");
  v.set_iterations(0);
  v.set_model_variant(static_cast<v1::ModelVariant>(-1));
  EXPECT_THAT(CheckRequest(v).message(), HasSubstr("model_variant = -1: not a"));

  // A composition is given the room of free text.
  v1::ImportLogRequest i;
  i.set_cluster(std::string(1024, 'c'));
  EXPECT_TRUE(CheckRequest(i).ok());
  i.set_cluster(std::string(1025, 'c'));
  EXPECT_THAT(CheckRequest(i).message(), HasSubstr("cluster = \"cccc"));
  v1::Sample sample;
  sample.set_cluster(std::string(2000, 'c'));
  EXPECT_THAT(CheckRequest(sample, "samples[2]").message(),
              HasSubstr("samples[2].cluster = \"cccc"));

  v1::PlanRequest plan;
  plan.mutable_slo()->set_target_epochs(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(CheckRequest(plan).message(), "slo.target_epochs = nan: must be a finite number");
}

// Lifetime observations may be many more than other repeated fields (the revocation
// models), up to limits::kMaxLifetimeObservations per type or group.
TEST(CheckRequest, LetsManyLifetimeObservationsThrough) {
  v1::SimulateRequest r;
  v1::LifetimeGroup* g = r.mutable_options()->mutable_simulation()->add_lifetime_groups();
  g->set_name("K80");
  for (size_t i = 0; i < limits::kMaxLifetimeObservations; ++i) {
    g->add_observations()->set_lifetime_s(60);
  }
  EXPECT_TRUE(CheckRequest(r).ok()) << CheckRequest(r);
  g->add_observations()->set_lifetime_s(60);
  EXPECT_EQ(CheckRequest(r).message(),
            "options.simulation.lifetime_groups[0].observations: 100001 entries, at most 100000");
  g->clear_observations();
  g->add_observations()->set_lifetime_s(std::nan(""));
  EXPECT_EQ(CheckRequest(r).message(),
            "options.simulation.lifetime_groups[0].observations[0].lifetime_s = nan: must be a "
            "finite number");
  // Other repeated fields keep the usual limit.
  for (size_t i = 0; i <= limits::kMaxRepeatedEntries; ++i) {
    r.mutable_options()->add_quota_overrides()->set_instance_type("a");
  }
  EXPECT_EQ(CheckRequest(r).message(), "options.quota_overrides: 10001 entries, at most 10000");
}

// The targets' own bounds (TargetOf), each error naming its field.
TEST(TargetOf, BoundsEveryTargetNamingTheField) {
  EXPECT_TRUE(TargetOf(0, 1e15, 0, 0).ok());
  EXPECT_EQ(TargetOf(0, 2e15, 0, 0, "slo.").status().message(),
            "slo.target_iterations = 2e+15: must be at most 1e+15");
  EXPECT_TRUE(TargetOf(0, 0, 1e6, 1e12).ok());
  EXPECT_EQ(TargetOf(0, 0, 1e7, 100).status().message(),
            "target_epochs = 1e+07: must be at most 1e+06");
  EXPECT_EQ(TargetOf(0, 0, 10, 1e13).status().message(),
            "dataset_size = 1e+13: must be at most 1e+12");
  // The largest target the request may state is one the model can still validate.
  auto largest = TargetOf(0, 0, 1e6, 1e12);
  ASSERT_TRUE(largest.ok());
  EXPECT_TRUE(largest->Validate().ok());
  EXPECT_FALSE(predictor::Target::Iterations(1e16).Validate().ok());
}

TEST(ToGrpc, CutsLongMessagesToValidUtf8) {
  const grpc::Status s = ToGrpc(absl::InvalidArgumentError(std::string(10000, 'x') + "\xff"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(s.error_message().size(), limits::kMaxStatusMessageBytes);
  EXPECT_EQ(limits::ValidUtf8(s.error_message()), s.error_message());
}

// ---- Request sizes (request_size.h) ----

TEST(MaxMessageBytes, APredictWithinTheLimitsFitsAndTheProbesDoesNot) {
  // As the predictor counts it: without a catalog's lifetimes and zones, which it does not read.
  const size_t limit =
      MaxMessageBytes(v1::PredictRequest::descriptor(), kMaxMessageBytes,
                      {"spotdnn.v1.InstanceType.lifetimes", "spotdnn.v1.InstanceType.zones"});
  // The largest cluster the limits allow: 10,000 instances with 256-byte type names.
  v1::PredictRequest request;
  request.mutable_workload()->set_name(std::string(limits::kMaxNameBytes, 'w'));
  request.mutable_catalog()->set_name(std::string(limits::kMaxNameBytes, 'c'));
  for (size_t i = 0; i < limits::kMaxRepeatedEntries; ++i) {
    auto* instance = request.mutable_cluster()->add_instances();
    instance->set_instance_type(std::string(limits::kMaxNameBytes, 'a'));
    instance->set_count(std::numeric_limits<int32_t>::max());
  }
  request.set_target_loss(1e300);
  EXPECT_LE(request.ByteSizeLong(), limit);
  // The probe's: 40,000,000 empty instances, 80,000,005 bytes.
  EXPECT_LT(limit, 80'000'005u);
}

TEST(MaxMessageBytes, CountsStringsRepeatedFieldsAndNestingAndCapsTheRest) {
  // Every message type of the spotdnn requests has a finite bound at most the cap.
  for (const google::protobuf::Descriptor* type :
       {v1::PredictRequest::descriptor(), v1::LossCurveRequest::descriptor(),
        v1::PlanRequest::descriptor(), v1::FitProfileRequest::descriptor(),
        v1::GetJobProgressRequest::descriptor()}) {
    const size_t limit = MaxMessageBytes(type);
    EXPECT_GT(limit, 0u) << type->full_name();
    EXPECT_LE(limit, static_cast<size_t>(kMaxMessageBytes)) << type->full_name();
  }
  // One string field (job_id: 256 bytes, its tag and length, 266 in all): the floor of 4 KiB.
  EXPECT_EQ(MaxMessageBytes(v1::GetJobProgressRequest::descriptor()), kMinRequestLimit);
  // A WorkloadProfile: 10,000 compute entries dominate (each a few strings of 256 bytes).
  const size_t profile = MaxMessageBytes(v1::WorkloadProfile::descriptor());
  EXPECT_GT(profile, limits::kMaxRepeatedEntries * limits::kMaxNameBytes);
  EXPECT_LT(profile, 10 * limits::kMaxRepeatedEntries * limits::kMaxNameBytes);
  // With lifetimes (100,000 observations for each of 10,000 types) a catalog is capped; without
  // them it is bounded by its types.
  EXPECT_EQ(MaxMessageBytes(v1::PredictRequest::descriptor()),
            static_cast<size_t>(kMaxMessageBytes));
  EXPECT_LT(MaxMessageBytes(v1::PredictRequest::descriptor(), kMaxMessageBytes,
                            {"spotdnn.v1.InstanceType.lifetimes", "spotdnn.v1.InstanceType.zones"}),
            static_cast<size_t>(kMaxMessageBytes));
  // A bytes field is bounded by its handler: the message counts as the cap.
  EXPECT_EQ(MaxMessageBytes(v1::ImportLogRequest::descriptor()),
            static_cast<size_t>(kMaxMessageBytes));
  EXPECT_EQ(MaxMessageBytes(v1::ImportLogRequest::descriptor(), 1000), 1000u);
}

// The limits the "Limits on requests" table of docs/security.md gives, printed so that it can be
// checked.
TEST(MaxMessageBytes, PrintsEachMethodsLimit) {
  for (const char* service : {"spotdnn.v1.Predictor", "spotdnn.v1.Provisioner",
                              "spotdnn.v1.Profiler", "spotdnn.v1.Detector"}) {
    const google::protobuf::ServiceDescriptor* d =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    ASSERT_NE(d, nullptr) << service;
    const std::vector<std::string> unused =
        std::string(service) == "spotdnn.v1.Predictor"
            ? std::vector<std::string>{"spotdnn.v1.InstanceType.lifetimes",
                                       "spotdnn.v1.InstanceType.zones"}
            : std::vector<std::string>{};
    for (int i = 0; i < d->method_count(); ++i) {
      const size_t limit = MaxMessageBytes(d->method(i)->input_type(), kMaxMessageBytes, unused);
      std::cout << "[limit] " << service << "/" << d->method(i)->name() << " "
                << d->method(i)->input_type()->full_name() << " " << limit << std::endl;
    }
  }
}

}  // namespace
}  // namespace spotdnn::services
