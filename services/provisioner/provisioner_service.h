// gRPC adapter of the provisioner: spotdnn.v1.Provisioner (Plan, Replan, Frontier).
#ifndef SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
#define SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/planner.h"
#include "provisioner/revocation_model.h"
#include "provisioner/simulator.h"
#include "services/common/model_resolver.h"
#include "services/provisioner/plan_inputs.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::services {

// How the provisioner bounds one call's work.
struct ProvisionerOptions {
  // Longest a search may run for one call (--max_solve_time), whatever the call's deadline;
  // a search also stops at the call's deadline or when the call is cancelled.
  absl::Duration max_solve_time = absl::Seconds(60);
  // Largest options.exhaustive_limit a request may ask for (INVALID_ARGUMENT above it).
  uint64_t max_exhaustive_limit = kMaxExhaustiveLimit;

  // In-process use by the CLI, whose caller is this process: no limits beyond the request's.
  static ProvisionerOptions InProcess() {
    return {.max_solve_time = absl::InfiniteDuration(),
            .max_exhaustive_limit = std::numeric_limits<uint64_t>::max()};
  }
};

// spotdnn.v1.Provisioner over the catalogs and workloads of a DataRegistry.
class ProvisionerServiceImpl final : public pb::Provisioner::Service {
 public:
  using Options = ProvisionerOptions;

  explicit ProvisionerServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                  ProvisionerOptions options = {});

  grpc::Status Plan(grpc::ServerContext* context, const pb::PlanRequest* request,
                    pb::PlanResponse* response) override;
  grpc::Status Replan(grpc::ServerContext* context, const pb::ReplanRequest* request,
                      pb::ReplanResponse* response) override;
  grpc::Status Frontier(grpc::ServerContext* context, const pb::FrontierRequest* request,
                        pb::FrontierResponse* response) override;
  grpc::Status Simulate(grpc::ServerContext* context, const pb::SimulateRequest* request,
                        pb::SimulateResponse* response) override;

 private:
  // The request's inputs with the stop check of `context` (see CallStopCheck).
  // A synchronous workload (`sync`, else the profile's) gets the synchronous planner's inputs,
  // for `global_batch` (0 = the profile's global_batch_size); with `sync_needs_model`, only
  // when the profile has an all-reduce model (Simulate simulates a parameter-server profile as a
  // synchronous job with its own model).
  absl::StatusOr<PlanInputs> Inputs(const grpc::ServerContext* context,
                                    const google::protobuf::Message& request,
                                    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog,
                                    const pb::Slo& slo, const pb::PlanOptions& options,
                                    absl::string_view existing_field = "options.existing",
                                    pb::SyncKind sync = pb::SYNC_KIND_UNSPECIFIED,
                                    int global_batch = 0, bool sync_needs_model = false);
  // Plan for the catalog `request` names as it is (Plan plans each zone's catalog with it).
  absl::Status PlanInCatalog(grpc::ServerContext* context, const pb::PlanRequest* request,
                             pb::PlanResponse* response);
  // The confidence part of Plan: replaces the plain answer's plan with the risk-aware one.
  absl::Status PlanWithConfidence(const pb::PlanRequest& request, const PlanInputs& in,
                                  pb::PlanResponse* response);
  ModelResolver models_;
  const ProvisionerOptions options_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
