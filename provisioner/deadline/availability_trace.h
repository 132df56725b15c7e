// Spot availability over time: how many instances of one type spot capacity allows, as a step
// function sampled on a regular grid of ticks. Two formats are read: the JSON of the NSDI'24 "Can't
// Be Late" study, {"metadata": {"gap_seconds": g}, "data": [count per tick, ...]}, and the CSV
// `time,count` step files of the Bamboo study (shared/data/bamboo-spot: seconds, or hours where
// the header names hours or the times have fractions of a second). A CSV step file is sampled on a
// grid of `kStepFileGapSeconds`: each tick holds the least count seen during it (a drop within a
// tick preempts at that tick).
#ifndef SPOTDNN_PROVISIONER_DEADLINE_AVAILABILITY_TRACE_H_
#define SPOTDNN_PROVISIONER_DEADLINE_AVAILABILITY_TRACE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::provisioner::deadline {

// The tick of a trace read from a CSV step file.
inline constexpr double kStepFileGapSeconds = 60;

// Spot capacity per tick: at time t (seconds from the trace's start) `count_at(t)` instances can
// run on spot; N instances are available when it is >= N.
struct AvailabilityTrace {
  std::string source;       // the file it came from (for messages)
  double gap_s = 0;         // the tick, > 0
  std::vector<int> counts;  // per tick, >= 0; not empty

  double duration_s() const { return gap_s * static_cast<double>(counts.size()); }
  // The tick holding time t: floor(t / gap_s), clamped into the trace.
  size_t TickAt(double t) const;
  int CountAt(double t) const { return counts[TickAt(t)]; }
};

// Parses the NSDI'24 JSON. `source` names the file in errors: INVALID_ARGUMENT "FILE:LINE: ..."
// for a bad number, a negative count, empty data, or a gap that is missing, 0 or negative.
absl::StatusOr<AvailabilityTrace> ParseJsonTrace(absl::string_view text, absl::string_view source);

// Parses a `time,count` step CSV (an optional header line; times in seconds, or in hours when
// `hours`); INVALID_ARGUMENT "FILE:LINE: ..." for a bad number, a decreasing time, a negative
// count or no data rows.
absl::StatusOr<AvailabilityTrace> ParseCsvTrace(absl::string_view text, absl::string_view source,
                                                bool hours);

// Reads a trace file: JSON when its text starts with '{', else CSV, in hours when its header's
// first column names hours ("hours", "time_h") or when any time has a fractional part (the
// Bamboo files in seconds hold whole seconds; the one in hours has three decimals), else seconds.
// NOT_FOUND when it cannot be read.
absl::StatusOr<AvailabilityTrace> ReadAvailabilityTrace(const std::string& path);

// Reads "TYPE=FILE,TYPE=FILE" (the --availability flag of the cluster commands; `key` names
// what stands before the '=', e.g. "ZONE" for the zones of one type): each one's trace.
// INVALID_ARGUMENT naming `field` and the item for a bad list; the reader's errors else.
absl::StatusOr<std::vector<std::pair<std::string, AvailabilityTrace>>> ReadTypeTraces(
    absl::string_view field, absl::string_view text, absl::string_view key = "TYPE");

// A cluster's traces as one: count 1 at a tick when every part has at least its instances
// (`parts`: a trace and the instances of its type), else 0. The tick is the parts' smallest, the
// length their shortest. INVALID_ARGUMENT when `parts` is empty.
absl::StatusOr<AvailabilityTrace> JointTrace(
    const std::vector<std::pair<const AvailabilityTrace*, int>>& parts);

// Availability statistics of a trace for N instances over [from_s, until_s): what a policy may
// know before a window starts. Up periods are maximal runs of ticks with count >= N.
struct AvailabilityStats {
  double observed_s = 0;   // time covered
  double available_s = 0;  // time with spot for N instances
  double usable_s = 0;     // sum over up periods of max(0, length - changeover): what spot gives
  int up_periods = 0;      // complete or not
  int down_periods = 0;
  double longest_down_s = 0;
  std::vector<double> down_lengths_s;  // every complete outage (the last one too when it ended)
  double trailing_down_s = 0;          // the outage still going on at until_s (0: spot is up)
};

// Statistics of `trace` for `instances` over [from_s, until_s), usable time with `changeover_s`.
AvailabilityStats TraceStats(const AvailabilityTrace& trace, double from_s, double until_s,
                             int instances, double changeover_s);

}  // namespace spotdnn::provisioner::deadline

#endif  // SPOTDNN_PROVISIONER_DEADLINE_AVAILABILITY_TRACE_H_
