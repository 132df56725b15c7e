// A provisioner request's inputs in domain form: the planning problem (ToPlanInputs), the
// revocation model and simulation options (RevocationModelOf, SimulationOptionsOf), and the limits
// the provisioner service holds requests to.
#ifndef SPOTDNN_SERVICES_PROVISIONER_PLAN_INPUTS_H_
#define SPOTDNN_SERVICES_PROVISIONER_PLAN_INPUTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/plan_model.h"
#include "provisioner/planner.h"
#include "provisioner/revocation_model.h"
#include "provisioner/simulator.h"
#include "services/common/model_resolver.h"
#include "services/provisioner/sync_plan.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {

// Largest options.exhaustive_limit a server takes by default: about a minute of one core's work.
inline constexpr uint64_t kMaxExhaustiveLimit = 1'000'000'000;

// A request's planning inputs in domain form.
struct PlanInputs {
  // The parameter-server model; null for a synchronous (all-reduce) workload (`sync` set).
  std::shared_ptr<const predictor::PerformanceModel> model;
  // What the searches and simulations plan with: `model`'s planner, or the synchronous one.
  std::shared_ptr<const provisioner::PlanModel> plan_model;
  std::shared_ptr<const SyncPlanInputs> sync;
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

// A synchronous workload's inputs in the same form (strategy and exhaustive limit from the
// request's options).
PlanInputs ToPlanInputs(SyncPlanInputs sync);

// The workload profile of `in`, whichever way it trains.
const predictor::WorkloadProfile& ProfileOf(const PlanInputs& in);

// A plan with feasible false: its strategy, why, and the types left out.
pb::Plan InfeasiblePlan(pb::PlanStrategy strategy, std::string reason,
                        const std::vector<std::string>& excluded);

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

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_PLAN_INPUTS_H_
