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

// Most runs a Simulate may ask for, and a confidence search or a simulated frontier per plan.
inline constexpr int kMaxServiceSimulateRuns = 1'000'000;
inline constexpr int kMaxServiceSearchRuns = 100'000;
// Most candidates a confidence search may simulate, and frontier plans a Frontier may simulate.
inline constexpr int kMaxServiceCandidates = 256;
inline constexpr int kMaxServiceFrontierSimulations = 200;
// Most lifetimes one type (or one lifetime group) may carry in a request, and in all.
inline constexpr int kMaxServiceLifetimesPerType = 100'000;
inline constexpr int kMaxServiceLifetimes = 1'000'000;
// Most re-plans one request's simulations may solve.
inline constexpr uint64_t kMaxServiceReplanSolves = 10'000'000;

// The revocation model of a request, per type of `catalog` (the catalog `ref` resolves to):
// options.simulation's lifetimes and lifetime groups, then the catalog's own lifetimes and
// interruption rates (see SimulationOptions in provisioner.proto). INVALID_ARGUMENT names the
// field (options.simulation.lifetimes[2].instance_type, ...).
absl::StatusOr<provisioner::RevocationModel> RevocationModelOf(
    const DataRegistry& registry, const pb::CatalogRef& ref,
    const predictor::InstanceCatalog& catalog, const pb::SimulationOptions& options);

// options.simulation as domain options; runs above `max_runs` are INVALID_ARGUMENT.
absl::StatusOr<provisioner::SimulationOptions> SimulationOptionsOf(const PlanInputs& in,
                                                                   const pb::SimulationOptions& o,
                                                                   int max_runs);

// A simulation's numbers as a RiskEstimate message.
void RiskToProto(const provisioner::SimulationResult& r, pb::RiskEstimate* out);

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
  absl::StatusOr<PlanInputs> Inputs(const grpc::ServerContext* context,
                                    const google::protobuf::Message& request,
                                    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog,
                                    const pb::Slo& slo, const pb::PlanOptions& options,
                                    absl::string_view existing_field = "options.existing");
  // The confidence part of Plan: replaces the plain answer's plan with the risk-aware one.
  absl::Status PlanWithConfidence(const pb::PlanRequest& request, const PlanInputs& in,
                                  pb::PlanResponse* response);
  ModelResolver models_;
  const ProvisionerOptions options_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_PROVISIONER_SERVICE_H_
