// The job controller's deadline guard: keeps the deadline when spot runs out. Per
// worker type it knows whether spot capacity is short (a spot launch the cloud refused, a
// takeover it could not launch) and asks the deadline policy (provisioner/deadline) what to run:
// spot and/or on-demand instances. While spot is short it probes with a spot launch, at most once
// a `probe_every` per type and backing off (doubling) after each refusal, and goes back to spot
// when a probe gets capacity. It also asks when the job's progress falls behind the plan's line.
//
// Pure decisions: it launches nothing and reads no clock; the caller (JobRun, job_deadline.cc)
// gives it the time and what runs, carries out its actions, reports what the cloud answered, and
// writes every decision in the job's log before acting on it (so that a resumed gateway replays
// them: the log's spot-short and spot-back events rebuild the guard's state).
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_DEADLINE_GUARD_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_DEADLINE_GUARD_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/deadline/deadline_policy.h"

namespace spotdnn::job {

// How the guard probes and checks.
struct GuardOptions {
  // The first spot probe after spot was short, and the least time between two probes of a type;
  // each refused probe doubles the wait, up to `probe_max`.
  absl::Duration probe_every = absl::Minutes(1);
  absl::Duration probe_max = absl::Minutes(16);
  // How often the policy is asked for a type that is behind the plan or on fallback.
  absl::Duration check_every = absl::Seconds(5);
  // Progress is behind the plan's line when it is short of it by more than this fraction (after
  // the first tenth of the planned time).
  double behind_tolerance = 0.15;
};

// One worker type at a tick: its instances running (not being revoked) and its prices.
struct GuardTypeNow {
  int running_spot = 0;
  int running_on_demand = 0;
  double spot_price_per_hour = 0;
  double on_demand_price_per_hour = 0;
};

// What the job looks like at a tick.
struct GuardNow {
  absl::Time now;
  double elapsed_s = 0;     // since the job's launch
  double time_left_s = 0;   // until the deadline
  double work_left_s = 0;   // of training with the whole cluster running
  double changeover_s = 0;  // an instance's start, billed without progress
  bool behind = false;      // progress behind the plan's line
  std::map<std::string, GuardTypeNow> types;
};

// What to do for one type: the policy's decision, and the launches and stops that carry it out.
// Spot first: on-demand instances are stopped only where spot (running, or launched by this action)
// covers the workers wanted, and only once the spot launch got all it asked for.
struct GuardAction {
  std::string instance_type;
  std::string trigger;  // "capacity", "probe", "behind-plan", "check"
  provisioner::deadline::DeadlineInput input;
  provisioner::deadline::DeadlineDecision decision;
  int launch_spot = 0;
  int launch_on_demand = 0;
  int stop_on_demand = 0;
  bool probe = false;  // the spot launch is a probe of capacity
};

class DeadlineGuard {
 public:
  // INVALID_ARGUMENT (from MakeDeadlinePolicy) for an unknown policy name.
  static absl::StatusOr<std::unique_ptr<DeadlineGuard>> Create(const std::string& policy,
                                                               GuardOptions options);

  // The cloud gave `type` less spot capacity than wanted: `wanted` instances of it should train,
  // `spot_running` spot instances of it run. The type is on fallback from now on (its policy
  // decides) until spot covers it again; the next probe is due a backoff after `at`.
  void OnSpotShort(const std::string& type, int wanted, int spot_running, absl::Time at);
  // A spot launch of `type` got all it asked for: capacity unknown again, the backoff reset.
  void OnSpotLaunched(const std::string& type);

  // The actions due now (none for types that need nothing).
  std::vector<GuardAction> Tick(const GuardNow& now);

  // True while some type is on fallback (its instances may be fewer than wanted on purpose).
  bool OnFallback() const;
  // The workers `type` should have while on fallback (0 when it is not).
  int Wanted(const std::string& type) const;
  // When the next spot probe of `type` is due (InfinitePast: none pending).
  absl::Time NextProbe(const std::string& type) const;

 private:
  struct TypeState {
    bool fallback = false;
    int wanted = 0;
    int spot_available = -1;  // -1: unknown
    absl::Time next_probe = absl::InfinitePast();
    absl::Duration backoff = absl::ZeroDuration();
    absl::Time next_check = absl::InfinitePast();
    bool probing = false;  // a probe's spot launch is out
    // The last decision logged (spot, on-demand); -1: none yet. A decision is logged when it
    // launches or stops something, or differs from this.
    int last_spot = -1;
    int last_on_demand = -1;
    std::unique_ptr<provisioner::deadline::DeadlinePolicy> policy;
  };
  DeadlineGuard(std::string policy, GuardOptions options)
      : policy_(std::move(policy)), options_(options) {}
  TypeState& StateOf(const std::string& type);

  std::string policy_;
  GuardOptions options_;
  std::map<std::string, TypeState> types_;
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_DEADLINE_GUARD_H_
