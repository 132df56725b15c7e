#include "services/clients/service_clients.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "services/common/convert.h"

namespace spotdnn::clients {

CallPolicy CallPolicy::LongRunning() {
  CallPolicy policy;
  policy.deadline = absl::Minutes(10);
  return policy;
}

namespace internal {

base::BackoffOptions BackoffOf(const CallPolicy& policy, bool idempotent) {
  // No jitter: a client's few retries of one call, not a crowd to spread.
  return {.max_attempts = idempotent ? std::max(1, policy.attempts) : 1,
          .initial = policy.backoff,
          .max = absl::InfiniteDuration(),
          .jitter = base::Jitter::kNone,
          .sleep = policy.sleep};
}

absl::Status Call(const CallPolicy& policy, bool idempotent,
                  const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  const base::BackoffPolicy backoff_policy(BackoffOf(policy, idempotent));
  base::Backoff backoff(backoff_policy);
  grpc::Status status;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + policy.deadline));
    status = call(&context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::optional<absl::Duration> wait = backoff.Failed();
    if (!wait.has_value()) break;
    backoff_policy.Sleep(*wait);
  }
  return services::FromGrpc(status);
}

}  // namespace internal

using internal::Unary;

absl::StatusOr<pb::PredictResponse> PredictorClient::Predict(
    const pb::PredictRequest& request) const {
  return Unary(stub_, &pb::Predictor::StubInterface::Predict, request, policy_, true);
}

absl::StatusOr<pb::PredictBatchResponse> PredictorClient::PredictBatch(
    const pb::PredictBatchRequest& request) const {
  return Unary(stub_, &pb::Predictor::StubInterface::PredictBatch, request, policy_, true);
}

absl::StatusOr<pb::LossCurveResponse> PredictorClient::LossCurve(
    const pb::LossCurveRequest& request) const {
  return Unary(stub_, &pb::Predictor::StubInterface::LossCurve, request, policy_, true);
}

absl::StatusOr<pb::ListCatalogsResponse> PredictorClient::ListCatalogs() const {
  return Unary(stub_, &pb::Predictor::StubInterface::ListCatalogs, pb::ListCatalogsRequest(),
               policy_, true);
}

absl::StatusOr<pb::ListWorkloadsResponse> PredictorClient::ListWorkloads() const {
  return Unary(stub_, &pb::Predictor::StubInterface::ListWorkloads, pb::ListWorkloadsRequest(),
               policy_, true);
}

absl::StatusOr<pb::PlanResponse> ProvisionerClient::Plan(const pb::PlanRequest& request) const {
  return Unary(stub_, &pb::Provisioner::StubInterface::Plan, request, policy_, true);
}

absl::StatusOr<pb::ReplanResponse> ProvisionerClient::Replan(
    const pb::ReplanRequest& request) const {
  return Unary(stub_, &pb::Provisioner::StubInterface::Replan, request, policy_, true);
}

absl::StatusOr<pb::FrontierResponse> ProvisionerClient::Frontier(
    const pb::FrontierRequest& request) const {
  return Unary(stub_, &pb::Provisioner::StubInterface::Frontier, request, policy_, true);
}

absl::StatusOr<pb::SimulateResponse> ProvisionerClient::Simulate(
    const pb::SimulateRequest& request) const {
  return Unary(stub_, &pb::Provisioner::StubInterface::Simulate, request, policy_, true);
}

absl::StatusOr<pb::ImportLogResponse> ProfilerClient::ImportLog(
    const pb::ImportLogRequest& request) const {
  return Unary(stub_, &pb::Profiler::StubInterface::ImportLog, request, policy_, false);
}

absl::StatusOr<pb::FitProfileResponse> ProfilerClient::FitProfile(
    const pb::FitProfileRequest& request) const {
  return Unary(stub_, &pb::Profiler::StubInterface::FitProfile, request, policy_, false);
}

absl::StatusOr<pb::WorkloadProfile> ProfilerClient::GetProfile(const std::string& name,
                                                               int version) const {
  pb::GetProfileRequest request;
  request.set_name(name);
  request.set_version(version);
  return Unary(stub_, &pb::Profiler::StubInterface::GetProfile, request, policy_, true);
}

absl::StatusOr<pb::ListProfilesResponse> ProfilerClient::ListProfiles() const {
  return Unary(stub_, &pb::Profiler::StubInterface::ListProfiles, pb::ListProfilesRequest(),
               policy_, true);
}

absl::StatusOr<pb::DeleteProfileResponse> ProfilerClient::DeleteProfile(
    const pb::DeleteProfileRequest& request) const {
  return Unary(stub_, &pb::Profiler::StubInterface::DeleteProfile, request, policy_, false);
}

absl::StatusOr<pb::WorkloadProfile> ProfilerClient::PutProfile(
    const pb::WorkloadProfile& profile) const {
  return Unary(stub_, &pb::Profiler::StubInterface::PutProfile, profile, policy_, false);
}

absl::StatusOr<pb::GetJobProgressResponse> ProfilerClient::GetJobProgress(
    const std::string& job_id) const {
  pb::GetJobProgressRequest request;
  request.set_job_id(job_id);
  return Unary(stub_, &pb::Profiler::StubInterface::GetJobProgress, request, policy_, true);
}

absl::Status DetectorClient::Register(const pb::WatchedInstance& instance) const {
  pb::RegisterInstanceRequest request;
  *request.mutable_instance() = instance;
  return Unary(stub_, &pb::Detector::StubInterface::RegisterInstance, request, policy_, true)
      .status();
}

absl::Status DetectorClient::Unregister(const std::string& instance_id) const {
  pb::UnregisterInstanceRequest request;
  request.set_instance_id(instance_id);
  return Unary(stub_, &pb::Detector::StubInterface::UnregisterInstance, request, policy_, true)
      .status();
}

absl::StatusOr<pb::ListInstancesResponse> DetectorClient::ListInstances(
    const pb::ListInstancesRequest& request) const {
  return Unary(stub_, &pb::Detector::StubInterface::ListInstances, request, policy_, true);
}

absl::StatusOr<pb::ReplicaStatusResponse> DetectorClient::ReplicaStatus() const {
  return Unary(stub_, &pb::Detector::StubInterface::ReplicaStatus, pb::ReplicaStatusRequest(),
               policy_, true);
}

absl::StatusOr<pb::ListLifetimesResponse> DetectorClient::ListLifetimes() const {
  return Unary(stub_, &pb::Detector::StubInterface::ListLifetimes, pb::ListLifetimesRequest(),
               policy_, true);
}

std::unique_ptr<grpc::ClientReaderInterface<pb::RevocationEvent>> DetectorClient::Watch(
    grpc::ClientContext* context, const pb::WatchEventsRequest& request) const {
  return stub_.WatchEvents(context, request);
}

}  // namespace spotdnn::clients
