// gRPC adapter of the performance model: spotdnn.v1.Predictor.
#ifndef SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
#define SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "predictor/performance_model.h"
#include "services/common/data_registry.h"
#include "spotdnn/v1/predictor.grpc.pb.h"

namespace spotdnn::services {

// Most clusters one PredictBatch call may carry.
inline constexpr int kMaxBatchClusters = 1'000'000;

// Resolves workload and catalog references to a compiled PerformanceModel, caching models of
// named (registered) pairs. Thread-safe.
class ModelResolver {
 public:
  explicit ModelResolver(std::shared_ptr<const DataRegistry> registry);

  absl::StatusOr<std::shared_ptr<const predictor::PerformanceModel>> Resolve(
      const pb::WorkloadRef& workload, const pb::CatalogRef& catalog);

  const DataRegistry& registry() const { return *registry_; }

 private:
  std::shared_ptr<const DataRegistry> registry_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const predictor::PerformanceModel>>
      cache_ ABSL_GUARDED_BY(mu_);
};

class PredictorServiceImpl final : public pb::Predictor::Service {
 public:
  explicit PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry);

  grpc::Status Predict(grpc::ServerContext* context, const pb::PredictRequest* request,
                       pb::PredictResponse* response) override;
  grpc::Status PredictBatch(grpc::ServerContext* context, const pb::PredictBatchRequest* request,
                            pb::PredictBatchResponse* response) override;
  grpc::Status LossCurve(grpc::ServerContext* context, const pb::LossCurveRequest* request,
                         pb::LossCurveResponse* response) override;
  grpc::Status ListCatalogs(grpc::ServerContext* context, const pb::ListCatalogsRequest* request,
                            pb::ListCatalogsResponse* response) override;
  grpc::Status ListWorkloads(grpc::ServerContext* context,
                             const pb::ListWorkloadsRequest* request,
                             pb::ListWorkloadsResponse* response) override;

 private:
  ModelResolver models_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
