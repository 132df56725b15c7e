// The public spotDNN prototype's worked ResNet-110 inputs (shared/reference/spotdnn-figures.md),
// built directly as domain types for tests. Types are in the reference table's order.
#ifndef SPOTDNN_TESTS_TESTING_PROTOTYPE_INPUTS_H_
#define SPOTDNN_TESTS_TESTING_PROTOTYPE_INPUTS_H_

#include <utility>

#include "predictor/types.h"

namespace spotdnn::predictor::testing_inputs {

// The prototype's five instance types with its quotas and spot prices.
inline InstanceCatalog PrototypeCatalog() {
  InstanceCatalog c;
  c.name = "prototype";
  c.types = {
      {"p2.xlarge", "K80", 1, 12, 0.918, 0.9, 2},   {"g4dn.4xlarge", "T4", 1, 16, 0.3612, 1.204, 5},
      {"g3.8xlarge", "M60", 2, 8, 0.6840, 2.28, 5}, {"g3.16xlarge", "M60", 4, 8, 1.5676, 4.56, 8},
      {"p2.8xlarge", "K80", 8, 12, 2.16, 7.2, 5},
  };
  c.parameter_server = {.instance_type = "m5.xlarge", .bandwidth_mb_per_s = 1200};
  c.pcie_bandwidth_mb_per_s = 10000;
  return c;
}

// Its fitted ResNet-110 profile, in the prototype variant.
inline WorkloadProfile PrototypeProfile() {
  WorkloadProfile p;
  p.name = "resnet110";
  p.parameter_size_mb = 11.5;
  p.required_bandwidth_mb_per_s = 142;
  const std::pair<const char*, std::pair<int, double>> speeds[] = {{"p2.xlarge", {1024, 1885}},
                                                                   {"g4dn.4xlarge", {1024, 750}},
                                                                   {"g3.8xlarge", {512, 1018}},
                                                                   {"g3.16xlarge", {512, 1995}},
                                                                   {"p2.8xlarge", {1024, 2115}}};
  for (const auto& [type, bs] : speeds) {
    ComputeProfile c;
    c.instance_type = type;
    c.batch_per_gpu = bs.first;
    c.measured_samples_per_s = bs.second;
    p.compute.push_back(c);
  }
  p.contention = ContentionModel{.a1 = 0.8, .b1 = -1.92};
  p.loss = LossModel{.g1 = 876.5, .g2 = -0.2, .g3 = 2507.6, .g4 = 1, .g5 = 0.5};
  p.variant = ModelVariant::kSpotdnnPrototype;
  return p;
}

}  // namespace spotdnn::predictor::testing_inputs

#endif  // SPOTDNN_TESTS_TESTING_PROTOTYPE_INPUTS_H_
