// `spotdnn status JOB --plot FILE.svg`: a job's predicted and actual loss curves side by side.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_LOSS_PLOT_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_LOSS_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/gateway/job/job_store.h"

namespace spotdnn::gateway {

// One point of a curve: seconds since the job's instances were launched, and the loss.
struct CurvePoint {
  double time_s = 0;
  double loss = 0;
};

// What the plot shows.
struct LossPlot {
  std::string title;
  std::vector<CurvePoint> predicted;  // the first plan's cluster, from the workload's loss model
  std::vector<CurvePoint> actual;     // the workers' smoothed loss as the job recorded it
  double target_loss = 0;             // 0: the job has no loss target (no line)
  double predicted_time_s = 0;        // the first plan's predicted time (0: none)
  double finished_s = 0;              // when the job ended, from its start (0: still running)
};

// The plot of a stored job: the predicted curve from its workload profile, catalog and first
// plan (none when the profile has no loss model), the actual one from `progress` (points without
// a loss left out). FAILED_PRECONDITION when the job never started or nothing reported a loss;
// DATA_LOSS naming the record when its stored JSON does not parse.
absl::StatusOr<LossPlot> LossPlotOf(const job::JobRecord& job,
                                    const std::vector<job::ProgressRecord>& progress);

// The plot as a self-contained SVG: both curves on shared axes (time in seconds, loss), a legend,
// the target loss as a horizontal line and the predicted and actual end as vertical ones.
std::string LossPlotSvg(const LossPlot& plot);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_LOSS_PLOT_H_
