#include "services/gateway/cli/sync_batch_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "predictor/types.h"

namespace spotdnn::gateway {

absl::StatusOr<SyncBatchFlags> ParseSyncBatchFlags(const Args& args) {
  SyncBatchFlags out;
  if (auto b = args.Get("--local-batch")) {
    auto parsed = ParseInt("--local-batch", *b, 1, predictor::kMaxBatchPerGpu);
    if (!parsed.ok()) return parsed.status();
    out.local_batch = *parsed;
  }
  if (auto b = args.Get("--global-batch")) {
    if (*b == "scale") {
      out.mode = v1::GLOBAL_BATCH_SCALE;
    } else if (*b == "fixed") {
      out.mode = v1::GLOBAL_BATCH_FIXED;
    } else {
      if (out.local_batch != 0) {
        return absl::InvalidArgumentError(
            "--global-batch, --local-batch: give one (--local-batch B is the global batch ranks x "
            "B, split evenly; --global-batch scale --local-batch B lets it follow the cluster)");
      }
      auto parsed = ParseInt("--global-batch", *b, 1, predictor::kMaxGlobalBatch);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(parsed.status().message(),
                         "; or \"scale\" (the global batch follows the cluster) or \"fixed\""));
      }
      out.global_batch = *parsed;
    }
  }
  return out;
}

bool HasSyncConvergence(const v1::Prediction& p) {
  return p.reference_iterations() > 0 || p.has_critical_batch() || p.reference_global_batch() > 0 ||
         p.has_spread();
}

std::string GlobalBatchText(const v1::Prediction& p) {
  std::string text = Fixed(p.wa_batch(), 0);
  if (p.global_batch_mode() != v1::GLOBAL_BATCH_SCALE) return text;
  int ranks = 0;
  for (const v1::WorkerPrediction& w : p.workers()) ranks += w.count() * w.gpus();
  const double local = ranks > 0 ? p.wa_batch() / ranks : 0;
  return absl::StrCat(text, " (scales: ", ranks, " ranks x ", Fixed(local, 0), ")");
}

std::vector<std::string> CriticalBatchRow(const v1::Prediction& p) {
  if (p.reference_global_batch() <= 0) return {};
  const std::string ref = Fixed(p.reference_global_batch(), 0);
  if (!p.has_critical_batch()) {
    return {"critical-batch law",
            absl::StrCat("none fitted: the steps of the convergence model's global batch ", ref)};
  }
  const double c = p.critical_batch();
  const double factor = (1 + c / p.wa_batch()) / (1 + c / p.reference_global_batch());
  return {"critical-batch law",
          absl::StrFormat("B_crit %.4g: %s steps at global batch %s, x %.3f at %s", c,
                          Fixed(p.reference_iterations(), 0), ref, factor, Fixed(p.wa_batch(), 0))};
}

void AddSyncBatchJson(const v1::Prediction& p, JsonObject& o) {
  o.String("global_batch_mode",
           p.global_batch_mode() == v1::GLOBAL_BATCH_SCALE ? "scale" : "fixed");
  if (!HasSyncConvergence(p)) return;
  o.Number("reference_global_batch", p.reference_global_batch());
  if (p.has_critical_batch()) o.Number("critical_batch", p.critical_batch());
  o.Number("reference_iterations", p.reference_iterations());
}

}  // namespace spotdnn::gateway
