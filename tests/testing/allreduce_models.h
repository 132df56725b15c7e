// Synchronous (all-reduce) step-time models for tests: a plain one of given speed, and random ones
// for property tests.
#ifndef SPOTDNN_TESTS_TESTING_ALLREDUCE_MODELS_H_
#define SPOTDNN_TESTS_TESTING_ALLREDUCE_MODELS_H_

#include <random>
#include <string>

#include "predictor/allreduce.h"

namespace spotdnn::testing_models {

// A model of `gpu_type` computing `per_sample_s` per sample besides 10 ms, with fixed all-reduce
// terms (20 ms inside an instance, 40 ms of ring, 50 ms across instances, 30 ms of straggling,
// 10 ms per GPU sharing the link) and gamma 2.
inline predictor::AllReduceModel PlainAllReduceModel(const std::string& gpu_type,
                                                     double per_sample_s) {
  predictor::AllReduceModel m;
  m.gpu_type = gpu_type;
  m.compute_fixed_s = 0.01;
  m.compute_per_sample_s = per_sample_s;
  m.compute_contention = 0.1;
  m.intra_fixed_s = 0.02;
  m.intra_ring_s = 0.04;
  m.cross_instance = true;
  m.cross_fixed_s = 0.05;
  m.cross_straggler_s = 0.03;
  m.cross_per_gpu_s = 0.01;
  m.overlap_gamma = 2;
  return m;
}

// Random models: every term drawn uniformly within a range typical of the fitted models, in one
// fixed order so a seed gives the same model.
struct RandomAllReduceOptions {
  // The chance that the type can span instances; 1 draws nothing (always).
  double cross_instance = 1;
  // The chance of a two-instance term e_2 (two instances slower than three); 0 draws nothing.
  double cross_pair = 0;
};

inline predictor::AllReduceModel RandomAllReduceModel(std::mt19937& rng,
                                                      const std::string& gpu_type,
                                                      const RandomAllReduceOptions& options = {}) {
  std::uniform_real_distribution<double> u(0, 1);
  predictor::AllReduceModel m;
  m.gpu_type = gpu_type;
  m.compute_fixed_s = 0.05 * u(rng);
  m.compute_per_sample_s = 1e-4 + 3e-3 * u(rng);
  m.compute_contention = 0.2 * u(rng);
  m.intra_fixed_s = 0.02 * u(rng);
  m.intra_ring_s = 0.1 * u(rng);
  m.cross_instance = options.cross_instance >= 1 || u(rng) < options.cross_instance;
  m.cross_fixed_s = 0.05 * u(rng);
  m.cross_straggler_s = 0.05 * u(rng);
  m.cross_per_gpu_s = 0.01 * u(rng);
  if (options.cross_pair > 0) m.cross_pair_s = u(rng) < options.cross_pair ? 0.3 * u(rng) : 0;
  m.overlap_gamma = 1 + 9 * u(rng);
  return m;
}

}  // namespace spotdnn::testing_models

#endif  // SPOTDNN_TESTS_TESTING_ALLREDUCE_MODELS_H_
