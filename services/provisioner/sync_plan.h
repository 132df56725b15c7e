// The provisioner's Plan for a synchronous (all-reduce) workload: the request in the form of
// provisioner::SyncPlanner, its plan, and the per-type local batches of the chosen cluster.
#ifndef SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_
#define SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "provisioner/plan_model.h"
#include "provisioner/planner.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {

// A synchronous request's planning inputs in domain form: what Plan, Frontier, Replan and
// Simulate share for a synchronous (all-reduce) workload.
struct SyncPlanInputs {
  v1::PlanRequest request;  // as asked (Frontier, Replan and Simulate: as their fields make it)
  predictor::WorkloadProfile profile;
  std::shared_ptr<const provisioner::SyncPlanModel> model;
  provisioner::PlanProblem problem;   // the request's SLO, quotas, running instances and limits
  std::vector<std::string> excluded;  // "type: reason" for types the plan leaves out
};

// Validates and converts a synchronous request as PlanSynchronous does (the global batch is the
// request's, else the profile's global_batch_size); INVALID_ARGUMENT names the field.
absl::StatusOr<SyncPlanInputs> ToSyncPlanInputs(const v1::PlanRequest& request,
                                                const v1::WorkloadProfile& workload,
                                                const v1::InstanceCatalog& catalog,
                                                uint64_t max_exhaustive_limit);

// A scored cluster of `in` as a Plan, its prediction the split of the global batch on it and
// `problem`'s target (the request's, or what a re-plan has left of it).
absl::StatusOr<v1::Plan> SyncPlanMessage(const SyncPlanInputs& in,
                                         const provisioner::PlanProblem& problem,
                                         const provisioner::Candidate& c,
                                         v1::PlanStrategy strategy);

// Whether a Plan request for `workload` is planned synchronously: the request's sync, or else
// the profile's.
bool PlansSynchronously(const v1::PlanRequest& request, const v1::WorkloadProfile& workload);

// Answers `request` for `workload` on `catalog` with provisioner::SyncPlanner: the exact (or,
// with options.strategy exhaustive, enumerated) plan for the request's global batch, else the
// profile's global_batch_size, with the chosen cluster's prediction (per-type local batches and
// accumulation steps); with options.include_baselines, the cheapest one-type plan. An infeasible
// SLO is a plan with feasible false and the reason, as the parameter-server plan's. Options it
// does not plan with (the spotdnn strategy, parameter servers, a bandwidth margin) are
// INVALID_ARGUMENT naming the field; `stop` ends the searches. (options.confidence is the
// service's: it searches the risk-aware plan after this one.)
absl::Status PlanSynchronous(const v1::PlanRequest& request, const v1::WorkloadProfile& workload,
                             const v1::InstanceCatalog& catalog, uint64_t max_exhaustive_limit,
                             const provisioner::StopCheck& stop, v1::PlanResponse* response);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_
