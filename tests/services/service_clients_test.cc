// The typed service clients over the generated gRPC mocks: the service's code and message come
// back unchanged, calls safe to repeat are retried while the service is unavailable (with a
// doubling backoff), and the others are made once.
#include "services/clients/service_clients.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spotdnn/v1/detector_mock.grpc.pb.h"
#include "spotdnn/v1/profiler_mock.grpc.pb.h"
#include "spotdnn/v1/provisioner_mock.grpc.pb.h"

namespace spotdnn::clients {
namespace {

using ::testing::_;
using ::testing::Return;

TEST(ServiceClientsTest, IdempotentCallsAreRetriedWhileUnavailable) {
  pb::MockProvisionerStub stub;
  std::vector<absl::Duration> waits;
  EXPECT_CALL(stub, Plan(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")))
      .WillOnce([](grpc::ClientContext* context, const pb::PlanRequest&, pb::PlanResponse* out) {
        // Each attempt has the policy's deadline.
        EXPECT_LT(context->deadline(), std::chrono::system_clock::now() + std::chrono::seconds(8));
        out->mutable_plan()->set_feasible(true);
        return grpc::Status::OK;
      });
  const ProvisionerClient client(
      stub, {.deadline = absl::Seconds(7), .sleep = [&](absl::Duration d) { waits.push_back(d); }});
  auto plan = client.Plan(pb::PlanRequest());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->plan().feasible());
  EXPECT_EQ(waits, (std::vector<absl::Duration>{absl::Milliseconds(200), absl::Milliseconds(400)}));
}

TEST(ServiceClientsTest, ErrorsKeepTheirCodeAndOnlyUnavailableIsRetried) {
  pb::MockDetectorStub stub;
  EXPECT_CALL(stub, RegisterInstance(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "instance_id is empty")));
  const DetectorClient client(stub, {.sleep = [](absl::Duration) {}});
  absl::Status s = client.Register(pb::WatchedInstance());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "instance_id is empty");
}

TEST(ServiceClientsTest, CallsThatStoreAreMadeOnce) {
  pb::MockProfilerStub stub;
  EXPECT_CALL(stub, FitProfile(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")));
  EXPECT_CALL(stub, ImportLog(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")));
  const ProfilerClient client(stub, {.sleep = [](absl::Duration) {}});
  EXPECT_EQ(client.FitProfile(pb::FitProfileRequest()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.ImportLog(pb::ImportLogRequest()).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace spotdnn::clients
