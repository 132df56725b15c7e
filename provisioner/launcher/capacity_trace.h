// Spot capacity over time, as a step function of how many instances of a type can run: what the
// local provider replays as its spot capacity (`"capacity_trace": {"p2.xlarge": "FILE"}`), so that
// a job that loses its spot capacity mid-run, and gets it back, can be run on one machine.
//
// Two formats: JSON `{"metadata": {"gap_seconds": g}, "data": [count per tick, ...]}` (the format
// published with the NSDI'24 "Can't Be Late" study; tick i covers [i*g, (i+1)*g)) and CSV
// `time,count` rows (the Bamboo step files: time in seconds, non-decreasing, a change written as
// two rows at the same time; a first line that is not numbers is a header, and a header naming
// hours, e.g. `time_h,count`, makes the times hours). After its last row or tick the last count
// holds.
//
// There is a second reader (provisioner/deadline, for `simulate` and `plan`); this one is kept
// behind ReadCapacityTrace so that the two can become one.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_CAPACITY_TRACE_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_CAPACITY_TRACE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::launcher {

// A step function: `counts[i]` instances can run from `starts_s[i]` until the next start.
struct CapacityTrace {
  std::vector<double> starts_s;  // increasing, the first 0
  std::vector<int> counts;       // >= 0, one per start

  // The count at trace time `t_s` (the first count before 0, the last after the end).
  int CountAt(double t_s) const;
  // The trace time of the last change (0 for a constant trace).
  double last_change_s() const { return starts_s.empty() ? 0 : starts_s.back(); }
};

// Parses `text` (JSON when it starts with '{', else CSV). INVALID_ARGUMENT naming `name` and the
// line (CSV) or field (JSON) for a bad number, decreasing time, a negative count, no data or a gap
// that is not > 0.
absl::StatusOr<CapacityTrace> ParseCapacityTrace(absl::string_view text, const std::string& name);

// Reads and parses the file at `path`; NOT_FOUND naming it when it cannot be read.
absl::StatusOr<CapacityTrace> ReadCapacityTrace(const std::string& path);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_CAPACITY_TRACE_H_
