// Replays one job of W seconds of work on one instance through a window of an availability trace
// (`spotdnn simulate --availability FILE --work ...`, bench/deadline_bench). The model (the README
// states it): each start of an instance, spot or on-demand, costs the changeover d of billed time
// without progress; progress survives preemption; billing is per second at the running instance's
// price; the deadline is D after the window's start. The policy decides at the window's start and
// at every tick of the trace; a spot instance is preempted at the first tick whose count is below
// the instances wanted. A job not done by its deadline is finished on on-demand and counts as
// missed (its cost includes that). "optimum" is an omniscient dynamic program over the window.
//
// Several zones (or regions) replay at once: the job runs spot in one zone at a time; when that
// zone's count drops below the instances it needs, it is preempted there, and it may start again
// in any zone with capacity (each start, a move to another zone too, costs the changeover). The
// zone is chosen by ChooseSpotZone (zone_choice.h; for greedy, the plain CheapestSpotZone); the
// policy sees spot as available while the rule finds a zone. The optimum's program has the zone in
// its state.
#ifndef SPOTDNN_PROVISIONER_DEADLINE_WINDOW_REPLAY_H_
#define SPOTDNN_PROVISIONER_DEADLINE_WINDOW_REPLAY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/deadline_policy.h"

namespace spotdnn::provisioner::deadline {

// The job of one window.
struct WindowJob {
  double work_s = 24 * 3600;
  double deadline_s = 36 * 3600;
  double changeover_s = 12 * 60;
  double spot_price_per_hour = 0.918;
  double on_demand_price_per_hour = 3.06;
  // Instances the job needs at once: a zone serves it while its count is at least this, a drop
  // below preempts them all; prices are per instance, hours are instance-hours.
  int instances = 1;
};

// OK when usable; INVALID_ARGUMENT naming the field (work, deadline, changeover, ...).
absl::Status ValidateWindowJob(const WindowJob& job);

// What one window cost.
struct WindowResult {
  double start_s = 0;
  bool met = false;
  bool on_demand_can_meet = false;  // deadline >= work + changeover
  double finish_s = 0;              // from the window's start
  double cost_usd = 0;
  double spot_hours = 0;       // billed, changeovers included
  double on_demand_hours = 0;  // billed, changeovers included
  int changeovers = 0;         // instance starts
  // Multi-zone replays: the zones spot ran in (the online replay: in the order first used; the
  // optimum: in the order listed), and the moves (spot starts in another zone than the last spot
  // run's).
  std::vector<std::string> zones;
  int moves = 0;
};

// A zone of a multi-zone replay: its name, its spot availability and its spot price.
struct Zone {
  std::string name;
  AvailabilityTrace trace;
  double spot_price_per_hour = -1;  // per instance; < 0: the job's spot price
};
inline constexpr int kMaxZones = 64;

// The zones on one grid: traces with different ticks are resampled to the smallest (a tick holds
// the least count of the ticks it overlaps), and all are cut to the shortest. INVALID_ARGUMENT
// for no zones, more than kMaxZones, an empty or repeated name.
absl::StatusOr<std::vector<Zone>> AlignZones(std::vector<Zone> zones);

// Replays `job` from `start_s` under `policy` (a fresh object: its history is set from the trace
// before `start_s`).
WindowResult ReplayWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                          DeadlinePolicy& policy);
// The same through several zones (aligned by AlignZones).
WindowResult ReplayZonesWindow(const std::vector<Zone>& zones, double start_s, const WindowJob& job,
                               DeadlinePolicy& policy);

// The least cost of the window knowing the whole trace: a dynamic program over (tick, progress,
// instance and its changeover phase). Exact when the work, deadline, changeover, start and tick
// are whole multiples of a common unit of at least 1 s with at most `kMaxOptimumSteps` units of
// work; otherwise progress is counted in coarser units, rounded down (never below the true
// optimum's cost). With `with_schedule` the result also gives the optimal schedule's finish, its
// spot and on-demand hours and its changeovers (about twice the time and memory; without, they
// are 0). When no schedule meets the deadline, `met` is false and the result is on-demand's from
// the window's start (one changeover, finishing after the deadline).
inline constexpr int kMaxOptimumSteps = 20000;
WindowResult OptimumWindow(const AvailabilityTrace& trace, double start_s, const WindowJob& job,
                           bool with_schedule = true);
// The same through several zones (aligned by AlignZones): the zone is part of the state, so the
// work grows with the number of zones.
WindowResult OptimumZonesWindow(const std::vector<Zone>& zones, double start_s,
                                const WindowJob& job, bool with_schedule = true);

// All windows of a trace and their totals.
struct ReplaySummary {
  std::string policy;
  std::vector<WindowResult> windows;
  double met_fraction = 0;
  double mean_cost_usd = 0;
  double spot_hours = 0, on_demand_hours = 0;  // totals
  int changeovers = 0;
  int moves = 0;
  int missed_on_demand_could_meet = 0;  // windows missed that on-demand alone would have met
};

// Window starts 0, every, 2 every, ... while start + deadline fits in the trace. INVALID_ARGUMENT
// when none fits or the job or `every` is bad.
absl::StatusOr<std::vector<double>> WindowStarts(const AvailabilityTrace& trace,
                                                 const WindowJob& job, double every_s);

// Replays every window with a fresh policy of `policy` ("optimum" or a MakeDeadlinePolicy name).
absl::StatusOr<ReplaySummary> ReplayWindows(const AvailabilityTrace& trace, const WindowJob& job,
                                            double every_s, absl::string_view policy);
// The same through several zones (aligned by AlignZones). The windows replay on every core;
// `progress`, when given, is called (from those threads, one call at a time) as each is done.
using ReplayProgress = std::function<void(size_t done, size_t total)>;
absl::StatusOr<ReplaySummary> ReplayZoneWindows(const std::vector<Zone>& zones,
                                                const WindowJob& job, double every_s,
                                                absl::string_view policy,
                                                const ReplayProgress& progress = nullptr);

}  // namespace spotdnn::provisioner::deadline

#endif  // SPOTDNN_PROVISIONER_DEADLINE_WINDOW_REPLAY_H_
