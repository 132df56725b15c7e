// The batch flags of a synchronous (all-reduce) prediction or plan, --global-batch B|scale|fixed
// and --local-batch B, and the rows and JSON fields that show how the global batch and the
// critical-batch law shaped its steps.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_SYNC_BATCH_FLAGS_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_SYNC_BATCH_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/gateway/cli/args.h"
#include "services/gateway/cli/output.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::gateway {

struct SyncBatchFlags {
  int global_batch = 0;  // --global-batch B: a fixed global batch of B samples per step
  int local_batch = 0;   // --local-batch B
  // --global-batch scale (every rank at its local batch: the global batch follows the ranks) or
  // fixed (the profile's global_batch_size, split by speed); unspecified: the profile's.
  v1::GlobalBatch mode = v1::GLOBAL_BATCH_UNSPECIFIED;
};

// Reads --global-batch and --local-batch. INVALID_ARGUMENT naming the flag: a value out of range,
// --global-batch B with --local-batch (the even split is ranks x B; give one).
absl::StatusOr<SyncBatchFlags> ParseSyncBatchFlags(const Args& args);

// Whether a synchronous prediction's steps came from a convergence model (a loss or metric
// target): its p10/p50/p90 and the critical-batch law then say something.
bool HasSyncConvergence(const v1::Prediction& p);

// The "global batch" row's value: "1024", or "1024 (scales: 8 ranks x 128)" when it follows the
// cluster.
std::string GlobalBatchText(const v1::Prediction& p);

// A row on how the steps were carried from the convergence model's global batch to this one:
// {"critical-batch law", "B_crit 998.4: 3197 steps at global batch 512, x 0.670 at 1024"}, the
// factor (1 + B_crit / B) / (1 + B_crit / B_ref); empty when the steps did not go through it.
std::vector<std::string> CriticalBatchRow(const v1::Prediction& p);

// The synchronous fields of --json: global_batch_mode ("fixed" or "scale"), and for a loss or
// metric target reference_global_batch, critical_batch (when fitted) and reference_iterations.
void AddSyncBatchJson(const v1::Prediction& p, JsonObject& o);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_SYNC_BATCH_FLAGS_H_
