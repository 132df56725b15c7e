// The deadline policy: per instance type, how many instances train on spot and how many on
// on-demand now, so that the job never misses a deadline that on-demand alone could still meet and
// otherwise spends as little as possible. One policy object serves the simulator (`spotdnn
// simulate`), the planner (`plan --availability`) and the job controller (`spotdnn run`); it has
// no clock of its own (the caller passes the time) and no gRPC.
//
// The model (the README states it): the plan trains `wanted` instances of a type; with k of them
// running, the job progresses at k / wanted of the plan's rate, so `work_left_s` is the time the
// rest of the job takes with all `wanted` instances running. Each start of an instance (spot or
// on-demand) costs `changeover_s` of billed time without progress. Progress survives preemption.
// Every policy but spot-only runs on-demand when on-demand costs no more than spot (spot would add
// preemptions for no saving).
#ifndef SPOTDNN_PROVISIONER_DEADLINE_DEADLINE_POLICY_H_
#define SPOTDNN_PROVISIONER_DEADLINE_DEADLINE_POLICY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/deadline/availability_trace.h"

namespace spotdnn::provisioner::deadline {

// What the policy knows when it decides for one instance type.
struct DeadlineInput {
  double now_s = 0;         // since the job (or the window) started
  double time_left_s = 0;   // until the deadline
  double work_left_s = 0;   // seconds of training left with all `wanted` instances running
  double changeover_s = 0;  // billed time without progress after each instance start
  double spot_price_per_hour = 0;
  double on_demand_price_per_hour = 0;
  int wanted = 1;             // instances of this type the plan trains on
  int running_spot = 0;       // instances on spot now (past or in their changeover)
  int running_on_demand = 0;  // instances on on-demand now
  int spot_available = 0;     // spot instances that can run now (capacity); -1: unknown
  // At most this long until the policy is asked again (a trace's tick); 0: unknown. The policy
  // keeps this much slack beyond a changeover before it may wait.
  double decision_interval_s = 0;
  // Whether DeadlineDecision::reason is wanted (a simulator replaying millions of decisions says
  // no; fixed reasons are still given).
  bool explain = true;
};

// What should run from now on. `spot` <= max(spot_available, 0) unless spot_available is -1
// (unknown: the caller probes by launching and treats a capacity error as 0 available).
struct DeadlineDecision {
  int spot = 0;
  int on_demand = 0;
  std::string reason;  // one line for the job log, e.g. "spot gone; slack 2.1 h < 2 changeovers"
};

// A policy. Stateful implementations keep what they saw (availability statistics) between calls;
// one object serves one job (or one simulated window).
class DeadlinePolicy {
 public:
  virtual ~DeadlinePolicy() = default;
  virtual DeadlineDecision Decide(const DeadlineInput& input) = 0;
  virtual absl::string_view name() const = 0;
  // What the availability of this type looked like before the job started (the trace before a
  // simulated window; a catalog's statistics for a real job). Policies that do not learn ignore it.
  virtual void SetHistory(const AvailabilityStats& /*history*/) {}
  // Whether the job's spot zone, when it may run in several, is the plain one (CheapestSpotZone in
  // zone_choice.h: the baseline, no history) rather than ChooseSpotZone's.
  virtual bool plain_zone_choice() const { return false; }
};

// The tunable constants of "ours" (see deadline_policy.cc for the rules). The defaults are the ones
// bench/deadline_bench --tune chose against the optimum on synthetic long-outage traces.
struct OursOptions {
  // The slack kept, beyond the changeover on-demand's start costs, when waiting through an outage,
  // in changeovers: once the outage forces on-demand, this is the room to come back to spot when
  // it returns (each round trip costs two changeovers). 0 is greedy's rule.
  double reserve_changeovers = 8;
  // The same in seconds, added.
  double reserve_s = 0;
  // Keep the reserve only when a return from on-demand to spot pays for its round trip over the
  // mean up period seen (else there is nothing to keep it for, and waiting longer uses more spot).
  bool reserve_only_if_returns_pay = true;
  // Plus this many round trips (two changeovers each) per expected preemption of the rest of the
  // work on spot (work left / the mean up period), at most `max_reserve_s` in all.
  double reserve_per_preemption = 0;
  double max_reserve_s = 1e18;
  // And at most this fraction of the slack the policy first saw (0: no such cap), so that a tight
  // window still waits for spot a while.
  double max_reserve_fraction = 0.5;
  // Above 0: also buy on-demand in an outage when the work left exceeds `supply_factor` times the
  // spot time the rest of the window is expected to give (usable availability rate x time left);
  // once on on-demand, stop only when it falls `stop_hysteresis_s` below. Off by default: the
  // tuning found waiting to the reserve cheaper.
  double supply_factor = 0;
  double stop_hysteresis_s = 2 * 3600;
  // In an outage, count that supply only after the outage's expected rest (the mean residual of
  // the outages seen that lasted longer than this one has so far).
  bool outage_residual = false;
  // The usable-availability rate assumed before any history is seen, and its weight in seconds.
  double prior_rate = 0.5;
  double prior_weight_s = 12 * 3600;
  // Extra slack (beyond the two changeovers a round trip costs) to go back from on-demand to spot.
  double back_to_spot_margin_s = 0;
};

// "ours" with the given constants.
std::unique_ptr<DeadlinePolicy> MakeOursPolicy(const OursOptions& options);

// The policy names MakeDeadlinePolicy knows, and "optimum" (the simulator's bound).
inline constexpr const char* kDeadlinePolicyNames[] = {"ours", "uniform-progress", "greedy",
                                                       "on-demand"};

// "ours" (the default), "uniform-progress", "greedy", "on-demand", and "spot-only" (no fallback:
// spot when there is capacity, else wait; it may miss). ("optimum" needs the whole
// trace and is not an online policy; see the simulator.) INVALID_ARGUMENT naming the known names.
absl::StatusOr<std::unique_ptr<DeadlinePolicy>> MakeDeadlinePolicy(absl::string_view name);

}  // namespace spotdnn::provisioner::deadline

#endif  // SPOTDNN_PROVISIONER_DEADLINE_DEADLINE_POLICY_H_
