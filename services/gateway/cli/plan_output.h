// How `spotdnn plan` shows its answer: a plan's JSON, its tables, the same SLO met other ways,
// the "no plan meets the SLO" lines, and the probability section of a risk-aware plan.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_OUTPUT_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_OUTPUT_H_

#include <optional>
#include <ostream>
#include <string>

#include "google/protobuf/repeated_ptr_field.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/target_flags.h"
#include "spotdnn/v1/common.pb.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// The best plan of the other way of training (`plan --sync`), or why there is none.
struct OtherSync {
  std::string label;  // "parameter-server plan", "all-reduce plan"
  std::optional<pb::Plan> plan;
  std::string error;  // when the other kind cannot be planned
};

// Whether a feasible plan is a synchronous (all-reduce) one: its prediction splits a global batch.
bool IsSynchronous(const pb::Plan& p);

// The fields every plan shows in JSON.
JsonObject PlanJson(const pb::Plan& p);

// The JSON of a plan with its simulation (PlanJson and, when simulated, its risk).
JsonObject RiskPlanJson(const pb::Plan& p);

// The "no plan meets the SLO" lines of a deadline, budget or frontier answer: when the budget is
// what no plan meets, the cheapest plan (its cost and time); else the fastest.
void PrintInfeasible(const std::string& reason, double fastest_time_s, double fastest_cost_usd,
                     double cheapest_time_s, double cheapest_cost_usd, std::ostream& out);

// The plan of a deadline or budget answer as tables: its instances, its numbers, the same SLO met
// other ways (the baselines and `other`, when given), and the types left out.
void PrintPlan(const pb::PlanResponse& r, const pb::PlanRequest& req, const std::string& workload,
               const std::string& catalog, const TargetFlags& target, const OtherSync* other,
               std::ostream& out);

// The probability section of a risk-aware (or simulated) plan: the plan beside the plain one.
void PrintRisk(const pb::PlanResponse& r, double confidence, std::ostream& out);

// A JSON array of strings.
std::string JsonStringArray(const google::protobuf::RepeatedPtrField<std::string>& items);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_PLAN_OUTPUT_H_
