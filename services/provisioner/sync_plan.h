// The provisioner's Plan for a synchronous (all-reduce) workload: the request in the form of
// provisioner::SyncPlanner, its plan, and the per-type local batches of the chosen cluster.
#ifndef SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_
#define SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_

#include <cstdint>

#include "absl/status/status.h"
#include "provisioner/planner.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {

// Whether a Plan request for `workload` is planned synchronously: the request's sync, or else
// the profile's.
bool PlansSynchronously(const v1::PlanRequest& request, const v1::WorkloadProfile& workload);

// Answers `request` for `workload` on `catalog` with provisioner::SyncPlanner: the exact (or,
// with options.strategy exhaustive, enumerated) plan for the request's global batch, else the
// profile's global_batch_size, with the chosen cluster's prediction (per-type local batches and
// accumulation steps); with options.include_baselines, the cheapest one-type plan. An infeasible
// SLO is a plan with feasible false and the reason, as the parameter-server plan's. Options it
// does not plan with (confidence, the spotdnn strategy, parameter servers, a bandwidth margin)
// are INVALID_ARGUMENT naming the field; `stop` ends the searches.
absl::Status PlanSynchronous(const v1::PlanRequest& request, const v1::WorkloadProfile& workload,
                             const v1::InstanceCatalog& catalog, uint64_t max_exhaustive_limit,
                             const provisioner::StopCheck& stop, v1::PlanResponse* response);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_SYNC_PLAN_H_
