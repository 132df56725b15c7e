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

// One point of the job's progress: seconds since launch, iterations done, dollars spent.
struct ProgressPoint {
  double time_s = 0;
  double iterations = 0;
  double cost_usd = 0;
};

// A revocation notice, seconds since launch, and the instance it was for.
struct RevocationMark {
  double time_s = 0;
  std::string instance;
};

// What the plot shows.
struct LossPlot {
  std::string title;
  std::vector<CurvePoint> predicted;  // the first plan's cluster, from the workload's loss model
  std::vector<CurvePoint> actual;     // the workers' smoothed loss as the job recorded it
  // Without a reported loss: the iterations done against the plan's straight line instead.
  std::vector<ProgressPoint> progress;
  double planned_iterations = 0;  // the first plan's
  std::vector<RevocationMark> revocations;
  double target_loss = 0;       // 0: the job has no loss target (no line)
  double predicted_time_s = 0;  // the first plan's predicted time (0: none)
  // The live refit's latest forecast (none before the first refit): its mean loss curve from the
  // step it was made at to its p90 finish at the measured speed, and its finish p10/p50/p90.
  std::vector<CurvePoint> refitted;
  double refit_finish_p10_s = 0, refit_finish_p50_s = 0, refit_finish_p90_s = 0;
  std::string refit_label;  // "refitted at step 200 (200 points)"
  double finished_s = 0;    // when the job ended, from its start (0: still running)
  double cost_usd = 0;      // the instances' cost to the end (or now)
  // What could not be drawn, said on the chart (empty: nothing missing).
  std::string missing;
};

// The plot of a stored job: the predicted curve from its workload profile, catalog and first
// plan (none when the profile has no loss model), the actual one from `progress` (points without
// a loss left out); the iterations and cost from `progress` and `instances`; the revocations'
// notices; the latest refitted curve and its finish interval from the "forecast" `events`. What the
// job lacks (no loss reported, not started) is said in `missing`, not an error. DATA_LOSS naming
// the record when its stored JSON does not parse.
absl::StatusOr<LossPlot> LossPlotOf(const job::JobRecord& job,
                                    const std::vector<job::ProgressRecord>& progress,
                                    const std::vector<job::InstanceRecord>& instances = {},
                                    const std::vector<job::RevocationRecord>& revocations = {},
                                    const std::vector<job::JobEventRecord>& events = {});

// Round tick values covering [lo, hi]: about `count` steps of 1, 2 or 5 times a power of ten,
// from a multiple of the step at or below lo to one at or above hi.
std::vector<double> NiceTicks(double lo, double hi, int count = 5);

// The plot as a self-contained SVG: the curves on shared axes (time in seconds, loss, or
// iterations without a loss) at round ticks, a legend, the target loss as a horizontal line, the
// predicted, refitted (with its p10-p90 band) and actual end as vertical ones, the revocations as
// marks, the cost, and what is missing.
std::string LossPlotSvg(const LossPlot& plot);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_LOSS_PLOT_H_
