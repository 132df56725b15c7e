// Where to run spot now, when an instance type can run in several zones (or regions): the one
// rule the simulator (`spotdnn simulate --availability ZONE=FILE,...`), the planner and the job
// controller share (the simulator's greedy baseline uses CheapestSpotZone instead). It answers only
// "which zone"; whether to run spot at all, wait or buy on-demand is the deadline policy's answer
// (deadline_policy.h), which sees spot as available when this rule finds a zone.
#ifndef SPOTDNN_PROVISIONER_DEADLINE_ZONE_CHOICE_H_
#define SPOTDNN_PROVISIONER_DEADLINE_ZONE_CHOICE_H_

#include <vector>

namespace spotdnn::provisioner::deadline {

// One zone as the rule sees it now.
struct ZoneOption {
  double spot_price_per_hour = 0;  // per instance
  bool has_capacity = false;       // spot for every instance the job needs, now
  // Blocked by the user (--avoid-zone), or it refused a launch within the last probe interval.
  bool blocked = false;
  double seen_s = 0;     // how long its availability has been watched
  double seen_up_s = 0;  // of which with capacity
  // The mean stretch with capacity seen there (the expected stay after a move), > 0.
  double expected_run_s = 2 * 3600;
  // The median of that stay: half the stretches seen at this age lasted at least this much more.
  // Where spot comes in short bursts and the odd long stretch, the mean above is the long
  // stretches' and the median the bursts'.
  double median_run_s = 2 * 3600;
  // The one-off cost of moving the job there from where its checkpoint is (copying it across
  // regions), in dollars for the whole job, and the time the copy adds to the changeover.
  double move_usd = 0;
  double move_s = 0;
};

// What was seen of one zone's capacity over time, for the ZoneOption the rule reads: how long it
// has been watched and up, and how long the stretch with capacity it is in now should last (the
// mean rest of the stretches seen that lasted longer than this one has so far: spot that has
// stayed long tends to stay; with none that long, as long again as it has lasted).
class ZoneHistory {
 public:
  // `seconds` pass with capacity (`up`) or without.
  void Observe(bool up, double seconds);
  double seen_s() const { return seen_s_; }
  double seen_up_s() const { return seen_up_s_; }
  // The expected rest of the current stretch with capacity (when down: of the next one, the mean
  // length seen). Before any stretch ended, the prior: 2 h, or the age when longer.
  double ExpectedStay() const;
  // The median of the same rest (the same prior).
  double MedianStay() const;

 private:
  std::vector<double> ended_;   // lengths of the stretches that ended, ascending
  std::vector<double> suffix_;  // suffix_[i] = sum of ended_[i..]
  double seen_s_ = 0, seen_up_s_ = 0, age_ = 0;
  bool up_ = false;
};

// What the rule needs to know about the job.
struct ZoneJob {
  int current = -1;         // the zone the job's spot instances run in now; -1: not on spot
  double work_left_s = 0;   // seconds of training left
  double changeover_s = 0;  // billed time without progress at every start
  double slack_s = 0;       // time left - work left
  int instances = 1;        // instances the job runs at once
  // While not on spot and the slack is at least this many changeovers, start only in a zone whose
  // median stay is worth a start (see ChooseSpotZone); below it, in any zone with capacity. The
  // default is the deadline policy's reserve (8) and the two changeovers a spot start needs.
  double wait_floor_changeovers = 10;
  // The median stay worth a start above that floor: at least this many changeovers, and at least
  // this share of the slack above the floor (at most the work left and a changeover).
  double worth_stay_changeovers = 5;
  double worth_stay_slack_share = 0.3;
};

// The zone to run spot in: the current one while it has capacity (moving to a cheaper one only
// when the saving over the expected stay there pays for two changeovers and the move, with two
// changeovers of slack to spare); otherwise the cheapest zone with capacity that is not blocked,
// then the one with the longest expected stay, then the most availability seen, then the first
// listed (ties keep the order the catalog or the user gave). When not on spot and the slack is
// above the floor (ZoneJob::wait_floor_changeovers), only zones whose median stay is worth a
// start count: a zone in a burst that has only just begun is passed over, and the job waits for a
// stretch that lasts. -1 when no zone counts.
int ChooseSpotZone(const std::vector<ZoneOption>& zones, const ZoneJob& job);

// The plain rule (greedy's), with no history: the current zone while it has capacity; otherwise
// the cheapest zone with capacity that is not blocked, the first listed on ties. -1 when no zone
// has capacity.
int CheapestSpotZone(const std::vector<ZoneOption>& zones, int current);

}  // namespace spotdnn::provisioner::deadline

#endif  // SPOTDNN_PROVISIONER_DEADLINE_ZONE_CHOICE_H_
