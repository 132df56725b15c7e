// gRPC adapter of the performance model: spotdnn.v1.Predictor.
#ifndef SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
#define SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "predictor/performance_model.h"
#include "services/common/data_registry.h"
#include "services/common/model_resolver.h"
#include "spotdnn/v1/predictor.grpc.pb.h"

namespace spotdnn::services {

// Most clusters one PredictBatch call may carry.
inline constexpr int kMaxBatchClusters = 1'000'000;

// How the predictor bounds its work and memory.
struct PredictorOptions {
  // Memory the answers of concurrent PredictBatch calls may take at once (about 3 bytes per byte
  // of the serialized answer: the messages, then their wire form); a call that does not fit
  // waits for others to finish, up to its deadline, then answers RESOURCE_EXHAUSTED.
  uint64_t max_answer_memory_bytes = uint64_t{1} << 30;
  // Longest one PredictBatch call may compute, whatever its deadline (DEADLINE_EXCEEDED).
  absl::Duration max_call_time = absl::Seconds(60);
};

// An upper bound on the serialized size of a PredictBatch answer's item for a cluster of `types`
// instance types (names of `name_bytes` bytes in all): a prediction with every field set, with the
// per-type rows when `detailed`.
size_t BatchItemBytes(bool detailed, int types, size_t name_bytes);

class PredictorServiceImpl final : public pb::Predictor::Service {
 public:
  explicit PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                PredictorOptions options = {});

  grpc::Status Predict(grpc::ServerContext* context, const pb::PredictRequest* request,
                       pb::PredictResponse* response) override;
  grpc::Status PredictBatch(grpc::ServerContext* context, const pb::PredictBatchRequest* request,
                            pb::PredictBatchResponse* response) override;
  grpc::Status LossCurve(grpc::ServerContext* context, const pb::LossCurveRequest* request,
                         pb::LossCurveResponse* response) override;
  grpc::Status ListCatalogs(grpc::ServerContext* context, const pb::ListCatalogsRequest* request,
                            pb::ListCatalogsResponse* response) override;
  grpc::Status ListWorkloads(grpc::ServerContext* context, const pb::ListWorkloadsRequest* request,
                             pb::ListWorkloadsResponse* response) override;

 private:
  // Reserves `bytes` of answer memory (see PredictorOptions), waiting until the call's deadline;
  // RESOURCE_EXHAUSTED when it cannot.
  absl::Status ReserveAnswerMemory(const grpc::ServerContext* context, uint64_t bytes);
  void ReleaseAnswerMemory(uint64_t bytes);

  ModelResolver models_;
  const PredictorOptions options_;
  absl::Mutex memory_mu_;
  absl::CondVar memory_cv_;
  uint64_t answer_memory_in_use_ ABSL_GUARDED_BY(memory_mu_) = 0;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
