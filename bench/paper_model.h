// The benchmarks' model of the paper's catalog: Table III (aws-paper-2023) with ResNet-110-like
// compute times for all 7 types, in the paper's model variant (R counted). Compute times are
// illustrative: per-GPU times ordered as the GPUs' speeds (V100 < T4 < M60 < K80), the
// prototype's S_parm, B_req, contention and loss.
#ifndef SPOTDNN_BENCH_PAPER_MODEL_H_
#define SPOTDNN_BENCH_PAPER_MODEL_H_

#include <utility>
#include <vector>

#include "predictor/performance_model.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"

namespace spotdnn::bench {

inline predictor::PerformanceModel PaperModel() {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  predictor::InstanceCatalog catalog =
      services::ToDomain(*registry.ResolveCatalog("aws-paper-2023"));
  predictor::WorkloadProfile profile = services::ToDomain(*registry.ResolveWorkload("resnet110"));
  profile.variant = predictor::ModelVariant::kPaper;
  profile.compute = {{.gpu_type = "V100", .batch_per_gpu = 1024, .compute_time_s = 0.21},
                     {.gpu_type = "T4", .batch_per_gpu = 1024, .compute_time_s = 1.2},
                     {.gpu_type = "M60", .batch_per_gpu = 512, .compute_time_s = 0.85},
                     {.gpu_type = "K80", .batch_per_gpu = 1024, .compute_time_s = 0.38}};
  return *predictor::PerformanceModel::Create(profile, catalog);
}

// The paper's 42-pair (loss, deadline) grid: 6 losses x 7 deadlines.
inline std::vector<std::pair<double, double>> PaperGrid() {
  std::vector<std::pair<double, double>> grid;
  for (double loss : {0.7, 0.8, 0.9, 1.0, 1.2, 1.5}) {
    for (double deadline : {300.0, 600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0}) {
      grid.emplace_back(loss, deadline);
    }
  }
  return grid;
}

}  // namespace spotdnn::bench

#endif  // SPOTDNN_BENCH_PAPER_MODEL_H_
