// The inputs the benches share: the paper's 7-type catalog (Table III, built in) and the
// prototype's ResNet-110 profile in the paper's model variant (R counted), with its compute times
// cleared so that each bench sets its own.
#ifndef SPOTDNN_BENCH_PAPER_INPUTS_H_
#define SPOTDNN_BENCH_PAPER_INPUTS_H_

#include "predictor/types.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"

namespace spotdnn::bench {

struct PaperInputs {
  predictor::InstanceCatalog catalog;
  predictor::WorkloadProfile profile;
};

inline PaperInputs LoadPaperInputs() {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  PaperInputs in{.catalog = services::ToDomain(*registry.ResolveCatalog("aws-paper-2023")),
                 .profile = services::ToDomain(*registry.ResolveWorkload("resnet110"))};
  in.profile.variant = predictor::ModelVariant::kPaper;
  in.profile.compute.clear();
  return in;
}

}  // namespace spotdnn::bench

#endif  // SPOTDNN_BENCH_PAPER_INPUTS_H_
