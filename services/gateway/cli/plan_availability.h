// A plan replayed through its types' spot availability traces (`spotdnn plan --availability
// TYPE=FILE,...`): with the on-demand fallback and spot only, and the answer's JSON of it.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_AVAILABILITY_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_AVAILABILITY_H_

#include <string>
#include <vector>

#include "services/gateway/cli/availability_replay.h"
#include "services/gateway/cli/output.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::gateway {

// One plan replayed through the traces (`plan --availability TYPE=FILE,...`): with the on-demand
// fallback (policy ours) and spot only.
struct AvailabilityOutcome {
  bool ok = false;
  std::string why;  // when not ok
  int windows = 0;
  double p_meet_fallback = 0, cost_fallback = 0, on_demand_hours_fallback = 0;
  int moves_fallback = -1;  // moves between zones (TYPE@ZONE traces); -1: one zone
  double p_meet_spot_only = 0, cost_spot_only = 0;
  double work_s = 0, slack_s = 0;
  std::vector<std::string> bought_on_demand, without_trace, notes;
};

// Replays a feasible plan under policy ours and spot-only; not ok (with why) when it cannot.
AvailabilityOutcome ReplayPlan(const pb::Plan& p, double deadline_s, double overhead_s,
                               const ClusterAvailability& f, const pb::InstanceCatalog* catalog);

// The JSON of an outcome: its two policies side by side, or why it was skipped.
JsonObject AvailabilityJson(const AvailabilityOutcome& a);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_AVAILABILITY_H_
