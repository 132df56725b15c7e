// A Plan request on a catalog that lists zones: the request once per candidate placement
// (provisioner/zone_placement.h), each with the effective catalog of its place inline, and the
// answer of the cheapest (deadline mode; the fastest in budget mode) with where it goes.
#ifndef SPOTDNN_SERVICES_PROVISIONER_ZONE_PLAN_H_
#define SPOTDNN_SERVICES_PROVISIONER_ZONE_PLAN_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "provisioner/zone_placement.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {

// The catalog's types with their zones, in domain form.
provisioner::ZonedCatalog ZonedCatalogOf(const v1::InstanceCatalog& catalog);

// Where PlanOptions lets a plan go.
provisioner::ZoneRequest ZoneRequestOf(const v1::PlanOptions& options);

// `catalog` as placement `p` makes it: only the types offered there, at its prices, in its
// region, with no zones of their own (every other field as in `catalog`).
v1::InstanceCatalog EffectiveCatalog(const v1::InstanceCatalog& catalog,
                                     const provisioner::Placement& p);

// Answers one Plan request (the service's plan for one catalog).
using PlanOne = std::function<absl::Status(const v1::PlanRequest&, v1::PlanResponse*)>;

// Answers `request`, whose catalog resolved to `catalog`, for a job that trains synchronously or
// not: a catalog without zones (and no zone in the request) is `plan` of the request as it is;
// otherwise `plan` of each candidate placement (the same effective catalog planned once), and the
// cheapest feasible answer (deadline mode; fastest in budget mode; the first listed on a tie), its
// plans with their zone, region and per-type zones and the plan with the places considered. A
// candidate `plan` refuses (INVALID_ARGUMENT, FAILED_PRECONDITION) is a place considered with
// why; when every one is refused, the first refusal is the answer. Other errors end the call.
absl::Status PlanAcrossZones(const v1::PlanRequest& request, const v1::InstanceCatalog& catalog,
                             bool synchronous, const PlanOne& plan, v1::PlanResponse* response);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROVISIONER_ZONE_PLAN_H_
