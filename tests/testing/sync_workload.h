// The built-in ResNet-110 profile with all-reduce models, for tests of synchronous planning.
#ifndef SPOTDNN_TESTS_TESTING_SYNC_WORKLOAD_H_
#define SPOTDNN_TESTS_TESTING_SYNC_WORKLOAD_H_

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "services/common/data_registry.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::testing_util {

// The built-in ResNet-110 named `name`, trained as all-reduce with a global batch of 512: T4 and
// M60 all-reduce models (the T4 faster per sample), its parameter-server data kept.
inline spotdnn::v1::WorkloadProfile SynchronousResnet(const std::string& name) {
  auto ps = services::DataRegistry::WithBuiltins().ResolveWorkload("resnet110");
  EXPECT_TRUE(ps.ok()) << ps.status();
  spotdnn::v1::WorkloadProfile p = *ps;
  p.set_name(name);
  p.set_sync(spotdnn::v1::SYNC_KIND_ALLREDUCE);
  p.set_global_batch_size(512);
  for (const auto& [gpu, per_sample] : {std::pair{"T4", 2e-3}, std::pair{"M60", 3.5e-3}}) {
    spotdnn::v1::AllReduceModel* m = p.add_allreduce();
    m->set_gpu_type(gpu);
    m->set_compute_fixed_s(0.02);
    m->set_compute_per_sample_s(per_sample);
    m->set_compute_contention(0.05);
    m->set_intra_fixed_s(0.01);
    m->set_intra_ring_s(0.03);
    m->set_cross_instance(true);
    m->set_cross_fixed_s(0.03);
    m->set_cross_straggler_s(0.02);
    m->set_cross_per_gpu_s(0.01);
    m->set_overlap_gamma(2);
  }
  return p;
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_SYNC_WORKLOAD_H_
