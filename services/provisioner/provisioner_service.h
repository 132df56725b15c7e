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
#include "services/common/model_resolver.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::services {

// Largest options.exhaustive_limit a server takes by default: about a minute of one core's work.
inline constexpr uint64_t kMaxExhaustiveLimit = 1'000'000'000;

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

// A request's planning inputs in domain form.
struct PlanInputs {
  std::shared_ptr<const predictor::PerformanceModel> model;
  provisioner::PlanProblem problem;
  provisioner::Strategy strategy = provisioner::Strategy::kExact;
  uint64_t exhaustive_limit = provisioner::kDefaultExhaustiveLimit;
  std::vector<std::string> excluded;  // "type: reason" for types the plan leaves out
  pb::Slo slo;                        // as asked (its target goes into every plan's prediction)
};

// Validates and converts the parts every provisioner request shares. INVALID_ARGUMENT names the
// field (slo.deadline_s, options.quota_overrides[2].instance_type, options.strategy, ...);
// `existing_field` is what the request calls options.existing (Replan's survivors). The caller
// has run CheckRequest on the request.
absl::StatusOr<PlanInputs> ToPlanInputs(ModelResolver& models, const pb::WorkloadRef& workload,
                                        const pb::CatalogRef& catalog, const pb::Slo& slo,
                                        const pb::PlanOptions& options,
                                        absl::string_view existing_field = "options.existing",
                                        uint64_t max_exhaustive_limit = kMaxExhaustiveLimit);

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

 private:
  // The request's inputs with the stop check of `context` (see CallStopCheck).
  absl::StatusOr<PlanInputs> Inputs(const grpc::ServerContext* context,
                                    const google::protobuf::Message& request,
                                    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog,
                                    const pb::Slo& slo, const pb::PlanOptions& options,
                                    absl::string_view existing_field = "options.existing");

  ModelResolver models_;
  const ProvisionerOptions options_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
