// gRPC adapter of the performance model: spotdnn.v1.Predictor.
#ifndef SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
#define SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "predictor/performance_model.h"
#include "services/common/data_registry.h"
#include "services/common/model_resolver.h"
#include "spotdnn/v1/predictor.grpc.pb.h"

namespace spotdnn::services {

// Most clusters one PredictBatch call may carry.
inline constexpr int kMaxBatchClusters = 1'000'000;

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
  grpc::Status ListWorkloads(grpc::ServerContext* context, const pb::ListWorkloadsRequest* request,
                             pb::ListWorkloadsResponse* response) override;

 private:
  ModelResolver models_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PREDICTOR_PREDICTOR_SERVICE_H_
