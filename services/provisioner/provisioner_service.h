// gRPC adapter of the provisioner: spotdnn.v1.Provisioner (Plan, Replan, Frontier).
#ifndef SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
#define SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/planner.h"
#include "services/common/model_resolver.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::services {

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
// field (slo.deadline_s, options.quota_overrides[2].instance_type, ...); `existing_field` is what
// the request calls options.existing (Replan's survivors).
absl::StatusOr<PlanInputs> ToPlanInputs(ModelResolver& models, const pb::WorkloadRef& workload,
                                        const pb::CatalogRef& catalog, const pb::Slo& slo,
                                        const pb::PlanOptions& options,
                                        absl::string_view existing_field = "options.existing");

class ProvisionerServiceImpl final : public pb::Provisioner::Service {
 public:
  explicit ProvisionerServiceImpl(std::shared_ptr<const DataRegistry> registry);

  grpc::Status Plan(grpc::ServerContext* context, const pb::PlanRequest* request,
                    pb::PlanResponse* response) override;
  grpc::Status Replan(grpc::ServerContext* context, const pb::ReplanRequest* request,
                      pb::ReplanResponse* response) override;
  grpc::Status Frontier(grpc::ServerContext* context, const pb::FrontierRequest* request,
                        pb::FrontierResponse* response) override;

 private:
  ModelResolver models_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
