// gRPC adapter of the performance model: spotdnn.v1.Predictor.
#ifndef SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
#define SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "predictor/performance_model.h"
#include "services/common/data_registry.h"
#include "services/common/model_resolver.h"
#include "spotdnn/v1/predictor.grpc.pb.h"

namespace spotdnn::services {

// Most clusters one PredictBatch call may carry.
inline constexpr int kMaxBatchClusters = 1'000'000;

// How the predictor bounds its work and memory.
struct PredictorOptions {
  // Memory concurrent PredictBatch calls may hold at once, counted as 3 bytes per byte of a
  // request while it is read, then 3 per byte of its answer (the messages, then their wire
  // form); a call that does not fit waits for others to finish, up to its deadline, then answers
  // RESOURCE_EXHAUSTED. One call alone always gets what it needs.
  uint64_t max_batch_memory_bytes = uint64_t{1} << 30;
  // Longest one PredictBatch call may compute, whatever its deadline (DEADLINE_EXCEEDED).
  absl::Duration max_call_time = absl::Seconds(60);

  // In-process use by the CLI, whose caller is this process: no time limit of the server's own.
  static PredictorOptions InProcess() {
    PredictorOptions options;
    options.max_call_time = absl::InfiniteDuration();
    return options;
  }
};

// An upper bound on the serialized size of a PredictBatch answer's item for a cluster of `types`
// instance types (names of `name_bytes` bytes in all): a prediction with every field set, with the
// per-type rows when `detailed`.
size_t BatchItemBytes(bool detailed, int types, size_t name_bytes);

// The predictor service. PredictBatch reads its request as raw bytes: the clusters are parsed
// and checked one at a time into compact counts (never a million Cluster messages at once), an
// answer that cannot fit in a message is refused before it is built, and the memory of concurrent
// batches is bounded (PredictorOptions).
class PredictorServiceImpl final : public pb::Predictor::Service {
 public:
  using Options = PredictorOptions;

  explicit PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                PredictorOptions options = {});

  grpc::Status Predict(grpc::ServerContext* context, const pb::PredictRequest* request,
                       pb::PredictResponse* response) override;
  // Serves PredictBatch from its request's bytes.
  grpc::Status PredictBatchRaw(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<grpc::ByteBuffer, pb::PredictBatchResponse>* stream);
  grpc::Status LossCurve(grpc::ServerContext* context, const pb::LossCurveRequest* request,
                         pb::LossCurveResponse* response) override;
  grpc::Status ListCatalogs(grpc::ServerContext* context, const pb::ListCatalogsRequest* request,
                            pb::ListCatalogsResponse* response) override;
  grpc::Status ListWorkloads(grpc::ServerContext* context, const pb::ListWorkloadsRequest* request,
                             pb::ListWorkloadsResponse* response) override;

 private:
  // Batch memory one call holds (see PredictorOptions); given back when destroyed. A call holds
  // one amount at a time (Hold replaces it), so two calls never wait on each other's growth.
  class BatchMemory {
   public:
    explicit BatchMemory(PredictorServiceImpl* service) : service_(service) {}
    ~BatchMemory() { service_->ReleaseBatchMemory(held_); }
    BatchMemory(const BatchMemory&) = delete;
    BatchMemory& operator=(const BatchMemory&) = delete;
    // Gives back what is held, then waits (up to the call's deadline) for `bytes`.
    absl::Status Hold(const grpc::ServerContext* context, uint64_t bytes);

   private:
    PredictorServiceImpl* service_;
    uint64_t held_ = 0;
  };
  // Predict for a synchronous (all-reduce) workload: the profile's all-reduce model, no
  // PerformanceModel.
  absl::Status PredictAllReduce(const pb::PredictRequest& request,
                                const pb::WorkloadProfile& workload,
                                const pb::InstanceCatalog& instance_catalog,
                                const predictor::Target& target,
                                pb::PredictResponse* response) const;
  // Waits until `bytes` fit the budget (or nothing else is held), up to the call's deadline and
  // the server's call limit; RESOURCE_EXHAUSTED (CANCELLED) when they do not in time. Returns
  // the amount taken (at most the budget).
  absl::StatusOr<uint64_t> ReserveBatchMemory(const grpc::ServerContext* context, uint64_t bytes);
  void ReleaseBatchMemory(uint64_t bytes);

  ModelResolver models_;
  const PredictorOptions options_;
  absl::Mutex memory_mu_;
  absl::CondVar memory_cv_;
  uint64_t batch_memory_in_use_ ABSL_GUARDED_BY(memory_mu_) = 0;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
