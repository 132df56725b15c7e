// Typed clients of the four services, used by the CLI and the job controller: one call per RPC
// returning absl::StatusOr<Response> (the service's code and message unchanged), one deadline
// policy, and retries of calls that are safe to repeat when the service is unavailable. They wrap
// `Stub::StubInterface`, so tests drive them with the generated gRPC mocks.
#ifndef SPOTDNN_SERVICES_CLIENTS_SERVICE_CLIENTS_H_
#define SPOTDNN_SERVICES_CLIENTS_SERVICE_CLIENTS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "grpcpp/grpcpp.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::clients {

namespace pb = ::spotdnn::v1;

// How every unary call is made.
struct CallPolicy {
  // Each attempt's deadline.
  absl::Duration deadline = absl::Seconds(60);
  // Attempts in all for a call that is safe to repeat (reads, plans, idempotent registrations),
  // when an attempt ends UNAVAILABLE; other calls are made once.
  int attempts = 3;
  // Wait before the second attempt; doubled for each later one.
  absl::Duration backoff = absl::Milliseconds(200);
  // How to wait (tests record instead of sleeping). Default: absl::SleepFor.
  std::function<void(absl::Duration)> sleep;

  // For work that may take minutes (imports and fits of large logs, exhaustive searches).
  static CallPolicy LongRunning();
};

namespace internal {

// The policy's retries as the tree's one backoff (base/backoff.h): `attempts` in all when
// `idempotent` (else one), waits doubling from `backoff`, no jitter.
base::BackoffOptions BackoffOf(const CallPolicy& policy, bool idempotent);

// One unary call under `policy`: a fresh context with the deadline per attempt, retried on
// UNAVAILABLE when `idempotent`.
absl::Status Call(const CallPolicy& policy, bool idempotent,
                  const std::function<grpc::Status(grpc::ClientContext*)>& call);

template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Unary(Stub& stub,
                               grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                            Response*),
                               const Request& request, const CallPolicy& policy, bool idempotent) {
  Response response;
  absl::Status status = Call(policy, idempotent, [&](grpc::ClientContext* context) {
    response.Clear();
    return (stub.*method)(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

}  // namespace internal

// spotdnn.v1.Predictor.
class PredictorClient {
 public:
  explicit PredictorClient(pb::Predictor::StubInterface& stub, CallPolicy policy = {})
      : stub_(stub), policy_(std::move(policy)) {}
  absl::StatusOr<pb::PredictResponse> Predict(const pb::PredictRequest& request) const;
  absl::StatusOr<pb::PredictBatchResponse> PredictBatch(
      const pb::PredictBatchRequest& request) const;
  absl::StatusOr<pb::LossCurveResponse> LossCurve(const pb::LossCurveRequest& request) const;
  absl::StatusOr<pb::ListCatalogsResponse> ListCatalogs() const;
  absl::StatusOr<pb::ListWorkloadsResponse> ListWorkloads() const;

 private:
  pb::Predictor::StubInterface& stub_;
  CallPolicy policy_;
};

// spotdnn.v1.Provisioner. Every call is a pure function of its request, so all are retried.
class ProvisionerClient {
 public:
  explicit ProvisionerClient(pb::Provisioner::StubInterface& stub, CallPolicy policy = {})
      : stub_(stub), policy_(std::move(policy)) {}
  absl::StatusOr<pb::PlanResponse> Plan(const pb::PlanRequest& request) const;
  absl::StatusOr<pb::ReplanResponse> Replan(const pb::ReplanRequest& request) const;
  absl::StatusOr<pb::FrontierResponse> Frontier(const pb::FrontierRequest& request) const;
  absl::StatusOr<pb::SimulateResponse> Simulate(const pb::SimulateRequest& request) const;

 private:
  pb::Provisioner::StubInterface& stub_;
  CallPolicy policy_;
};

// spotdnn.v1.Profiler. Imports, fits and stores are made once (a fit or a put would store again; a
// repeated import stores no sample twice, but answers them as duplicates).
class ProfilerClient {
 public:
  explicit ProfilerClient(pb::Profiler::StubInterface& stub, CallPolicy policy = {})
      : stub_(stub), policy_(std::move(policy)) {}
  absl::StatusOr<pb::ImportLogResponse> ImportLog(const pb::ImportLogRequest& request) const;
  absl::StatusOr<pb::FitProfileResponse> FitProfile(const pb::FitProfileRequest& request) const;
  absl::StatusOr<pb::WorkloadProfile> GetProfile(const std::string& name, int version = 0) const;
  absl::StatusOr<pb::ListProfilesResponse> ListProfiles() const;
  absl::StatusOr<pb::DeleteProfileResponse> DeleteProfile(
      const pb::DeleteProfileRequest& request) const;
  absl::StatusOr<pb::WorkloadProfile> PutProfile(const pb::WorkloadProfile& profile) const;
  absl::StatusOr<pb::GetJobProgressResponse> GetJobProgress(const std::string& job_id) const;

 private:
  pb::Profiler::StubInterface& stub_;
  CallPolicy policy_;
};

// spotdnn.v1.Detector. Registrations are idempotent (see detector.proto), so they are retried.
class DetectorClient {
 public:
  explicit DetectorClient(pb::Detector::StubInterface& stub, CallPolicy policy = {})
      : stub_(stub), policy_(std::move(policy)) {}
  absl::Status Register(const pb::WatchedInstance& instance) const;
  // NOT_FOUND when the detector does not know the instance.
  absl::Status Unregister(const std::string& instance_id) const;
  absl::StatusOr<pb::ListInstancesResponse> ListInstances(
      const pb::ListInstancesRequest& request) const;
  absl::StatusOr<pb::ReplicaStatusResponse> ReplicaStatus() const;
  absl::StatusOr<pb::ListLifetimesResponse> ListLifetimes() const;
  // Opens a WatchEvents stream on `context` (no deadline unless the caller sets one; cancel it
  // with context->TryCancel()).
  std::unique_ptr<grpc::ClientReaderInterface<pb::RevocationEvent>> Watch(
      grpc::ClientContext* context, const pb::WatchEventsRequest& request) const;

 private:
  pb::Detector::StubInterface& stub_;
  CallPolicy policy_;
};

}  // namespace spotdnn::clients

#endif  // SPOTDNN_SERVICES_CLIENTS_SERVICE_CLIENTS_H_
