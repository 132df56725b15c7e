#include "services/predictor/predictor_service.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/common/convert.h"

namespace spotdnn::services {
namespace {

absl::Status CheckTargetLoss(double target_loss) {
  if (!std::isfinite(target_loss)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target_loss = %g: must be a finite number", target_loss));
  }
  return absl::OkStatus();
}

}  // namespace

PredictorServiceImpl::PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry)
    : models_(std::move(registry)) {}

grpc::Status PredictorServiceImpl::Predict(grpc::ServerContext*, const pb::PredictRequest* request,
                                           pb::PredictResponse* response) {
  auto target = TargetOf(request->target_loss(), request->target_iterations(),
                         request->target_epochs(), request->dataset_size());
  if (!target.ok()) return ToGrpc(target.status());
  if (target->is_loss()) {
    if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) return ToGrpc(s);
  }
  auto model = models_.Resolve(request->workload(), request->catalog(),
                               {.require_loss_model = target->is_loss()});
  if (!model.ok()) return ToGrpc(model.status());
  auto cluster = ToDomain(request->cluster(), (*model)->catalog());
  if (!cluster.ok()) return ToGrpc(cluster.status());
  auto prediction = (*model)->Predict(*cluster, *target);
  if (!prediction.ok()) return ToGrpc(prediction.status());
  *response->mutable_prediction() = ToProto(*prediction, (*model)->catalog());
  SetTarget(request->target_loss(), request->target_iterations(), request->target_epochs(),
            request->dataset_size(), response->mutable_prediction());
  response->set_workload((*model)->profile().name);
  response->set_catalog((*model)->catalog().name);
  return grpc::Status::OK;
}

grpc::Status PredictorServiceImpl::PredictBatch(grpc::ServerContext*,
                                                const pb::PredictBatchRequest* request,
                                                pb::PredictBatchResponse* response) {
  auto target = TargetOf(request->target_loss(), request->target_iterations(),
                         request->target_epochs(), request->dataset_size());
  if (!target.ok()) return ToGrpc(target.status());
  if (target->is_loss()) {
    if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) return ToGrpc(s);
  }
  if (request->clusters_size() > kMaxBatchClusters) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "clusters: %d given, at most %d per call", request->clusters_size(), kMaxBatchClusters)));
  }
  auto model = models_.Resolve(request->workload(), request->catalog(),
                               {.require_loss_model = target->is_loss()});
  if (!model.ok()) return ToGrpc(model.status());
  const predictor::PerformanceModel& m = **model;
  const double loss = request->target_loss();
  if (target->is_loss() && !(loss > m.profile().loss->g5)) {
    return ToGrpc(m.ErrorStatus({.error = predictor::EstimateError::kTargetAtOrBelowFloor}, loss));
  }
  // Validate every cluster before answering any: bad input fails the whole call.
  std::vector<predictor::Cluster> clusters;
  clusters.reserve(request->clusters_size());
  for (int i = 0; i < request->clusters_size(); ++i) {
    const std::string field = absl::StrCat("clusters[", i, "]");
    auto cluster = ToDomain(request->clusters(i), m.catalog(), field);
    if (!cluster.ok()) return ToGrpc(cluster.status());
    if (cluster->Workers() == 0) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat(field, " is empty: give at least one instance type with a count above 0")));
    }
    clusters.push_back(*std::move(cluster));
  }
  response->mutable_items()->Reserve(request->clusters_size());
  for (const predictor::Cluster& cluster : clusters) {
    pb::BatchItem* item = response->add_items();
    const predictor::Estimate estimate =
        m.Evaluate(cluster.counts, *target, cluster.parameter_servers);
    if (!estimate.ok()) {
      const absl::Status status = estimate.error == predictor::EstimateError::kUnusableType
                                      ? m.UnusableStatus(cluster.counts, estimate.unusable_type)
                                      : m.ErrorStatus(estimate, *target);
      item->set_error_code(static_cast<int>(status.code()));
      item->set_error_message(std::string(status.message()));
      continue;
    }
    if (request->detailed()) {
      auto prediction = m.Predict(cluster, *target);
      if (prediction.ok()) *item->mutable_prediction() = ToProto(*prediction, m.catalog());
    } else {
      pb::Prediction* p = item->mutable_prediction();
      EstimateToProto(estimate, p);
      p->set_parameter_servers(cluster.parameter_servers);
    }
    SetTarget(loss, request->target_iterations(), request->target_epochs(), request->dataset_size(),
              item->mutable_prediction());
  }
  return grpc::Status::OK;
}

grpc::Status PredictorServiceImpl::LossCurve(grpc::ServerContext*,
                                             const pb::LossCurveRequest* request,
                                             pb::LossCurveResponse* response) {
  auto model = models_.Resolve(request->workload(), request->catalog());
  if (!model.ok()) return ToGrpc(model.status());
  const predictor::PerformanceModel& m = **model;
  auto cluster = ToDomain(request->cluster(), m.catalog());
  if (!cluster.ok()) return ToGrpc(cluster.status());
  if (request->points() < 0) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrFormat("points = %d: must be >= 0 (0 = 50)", request->points())));
  }
  const int points = request->points() == 0 ? 50 : request->points();
  double horizon = request->horizon_s();
  if (horizon == 0) {
    auto target = TargetOf(request->target_loss(), request->target_iterations(),
                           request->target_epochs(), request->dataset_size());
    if (!target.ok()) return ToGrpc(target.status());
    if (target->is_loss()) {
      if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) {
        return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
            "horizon_s is 0, so the curve runs to target_loss's time; ", s.message())));
      }
    }
    auto prediction = m.Predict(*cluster, *target);
    if (!prediction.ok()) return ToGrpc(prediction.status());
    horizon = prediction->estimate.time_s;
  }
  auto curve = m.LossCurve(*cluster, horizon, points);
  if (!curve.ok()) return ToGrpc(curve.status());
  for (const predictor::LossPoint& p : *curve) {
    pb::LossPoint* out = response->add_points();
    out->set_time_s(p.time_s);
    out->set_normalized_iterations(p.normalized_iterations);
    out->set_loss(p.loss);
  }
  response->set_expected_iteration_time_s(
      curve->size() > 1 ? (*curve)[1].time_s / (*curve)[1].normalized_iterations : 0);
  return grpc::Status::OK;
}

grpc::Status PredictorServiceImpl::ListCatalogs(grpc::ServerContext*,
                                                const pb::ListCatalogsRequest*,
                                                pb::ListCatalogsResponse* response) {
  for (const auto& [name, catalog] : models_.registry().catalogs()) {
    *response->add_catalogs() = catalog;
  }
  return grpc::Status::OK;
}

grpc::Status PredictorServiceImpl::ListWorkloads(grpc::ServerContext*,
                                                 const pb::ListWorkloadsRequest*,
                                                 pb::ListWorkloadsResponse* response) {
  for (const auto& [name, workload] : models_.registry().workloads()) {
    *response->add_workloads() = workload;
  }
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
