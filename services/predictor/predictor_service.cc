#include "services/predictor/predictor_service.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "services/common/convert.h"
#include "services/common/limits.h"
#include "services/common/request_check.h"
#include "services/common/server.h"

namespace spotdnn::services {
namespace {

absl::Status CheckTargetLoss(double target_loss) {
  if (!std::isfinite(target_loss)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target_loss = %g: must be a finite number", target_loss));
  }
  return absl::OkStatus();
}

// Upper bound on an error item: error_code and error_message (`message_bytes`) in a BatchItem.
size_t ErrorItemBytes(size_t message_bytes) { return 4 + 6 + 3 + message_bytes; }

}  // namespace

size_t BatchItemBytes(bool detailed, int types, size_t name_bytes) {
  // The item's tag and length (4), the prediction's tag and length (4), worker_count and
  // parameter_servers (6 each), twelve doubles (9 each); per type row: its tag and length (3), the
  // name's tag and length (3), count, gpus and batch_size (6 each), six doubles (9 each).
  size_t bytes = 8 + 2 * 6 + 12 * 9;
  if (detailed) bytes += static_cast<size_t>(types) * (3 + 3 + 3 * 6 + 6 * 9) + name_bytes;
  return bytes;
}

PredictorServiceImpl::PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                           PredictorOptions options)
    : models_(std::move(registry)), options_(options) {}

grpc::Status PredictorServiceImpl::Predict(grpc::ServerContext*, const pb::PredictRequest* request,
                                           pb::PredictResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) return ToGrpc(s);
  auto model = models_.Resolve(request->workload(), request->catalog());
  if (!model.ok()) return ToGrpc(model.status());
  auto cluster = ToDomain(request->cluster(), (*model)->catalog());
  if (!cluster.ok()) return ToGrpc(cluster.status());
  auto prediction = (*model)->Predict(*cluster, request->target_loss());
  if (!prediction.ok()) return ToGrpc(prediction.status());
  *response->mutable_prediction() = ToProto(*prediction, (*model)->catalog());
  response->set_workload((*model)->profile().name);
  response->set_catalog((*model)->catalog().name);
  return grpc::Status::OK;
}

absl::Status PredictorServiceImpl::ReserveAnswerMemory(const grpc::ServerContext* context,
                                                       uint64_t bytes) {
  const uint64_t budget = options_.max_answer_memory_bytes;
  bytes = std::min(bytes, budget);  // a call alone always gets it
  const auto deadline = context->deadline();
  absl::Time until = absl::Now() + options_.max_call_time;
  if (deadline != std::chrono::system_clock::time_point::max()) {
    until = std::min(until, absl::FromChrono(deadline));
  }
  absl::MutexLock lock(&memory_mu_);
  while (answer_memory_in_use_ + bytes > budget) {
    if (context->IsCancelled()) return absl::CancelledError("the call was cancelled");
    if (absl::Now() >= until) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the server is building other large answers (%d of its %d bytes for answers are in "
          "use; this one needs about %d): retry later, or send fewer clusters per call",
          answer_memory_in_use_, budget, bytes));
    }
    memory_cv_.WaitWithDeadline(&memory_mu_,
                                std::min(until, absl::Now() + absl::Milliseconds(100)));
  }
  answer_memory_in_use_ += bytes;
  return absl::OkStatus();
}

void PredictorServiceImpl::ReleaseAnswerMemory(uint64_t bytes) {
  absl::MutexLock lock(&memory_mu_);
  answer_memory_in_use_ -=
      std::min(answer_memory_in_use_, std::min(bytes, options_.max_answer_memory_bytes));
  memory_cv_.SignalAll();
}

grpc::Status PredictorServiceImpl::PredictBatch(grpc::ServerContext* context,
                                                const pb::PredictBatchRequest* request,
                                                pb::PredictBatchResponse* response) {
  // The clusters are checked below, as they are converted (a reflection walk over a million of
  // them would cost more than predicting them).
  if (auto s = CheckRequest(*request, "", {"clusters"}); !s.ok()) return ToGrpc(s);
  if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) return ToGrpc(s);
  const int n = request->clusters_size();
  if (n > kMaxBatchClusters) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrFormat("clusters: %d given, at most %d per call", n, kMaxBatchClusters)));
  }
  auto model = models_.Resolve(request->workload(), request->catalog());
  if (!model.ok()) return ToGrpc(model.status());
  const predictor::PerformanceModel& m = **model;
  const double loss = request->target_loss();
  if (!(loss > m.profile().loss->g5)) {
    return ToGrpc(m.ErrorStatus({.error = predictor::EstimateError::kTargetAtOrBelowFloor}, loss));
  }
  const std::function<absl::Status()> stop =
      CallStopCheck(context, options_.max_call_time, "the batch", "the server's call time limit");
  const bool detailed = request->detailed();
  const size_t types = m.catalog().types.size();
  // Pass 1: validate every cluster before answering any (bad input fails the whole call), and
  // bound the answer's size so that one too big for a message is refused before it is built.
  std::vector<int> counts(static_cast<size_t>(n) * types);
  std::vector<int> servers(n);
  uint64_t answer_bytes = 16;
  for (int i = 0; i < n; ++i) {
    if (i % 4096 == 4095) {
      if (auto s = stop(); !s.ok()) return ToGrpc(s);
    }
    const pb::Cluster& c = request->clusters(i);
    auto field = [i] { return absl::StrCat("clusters[", i, "]"); };
    if (static_cast<size_t>(c.instances_size()) > limits::kMaxRepeatedEntries) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrFormat("%s.instances: %d entries, at most %d", field(), c.instances_size(),
                          limits::kMaxRepeatedEntries)));
    }
    for (int k = 0; k < c.instances_size(); ++k) {
      const std::string error =
          limits::LengthError(absl::StrCat(field(), ".instances[", k, "].instance_type"),
                              c.instances(k).instance_type(), limits::kMaxNameBytes);
      if (!error.empty()) return ToGrpc(absl::InvalidArgumentError(error));
    }
    auto cluster = ToDomain(c, m.catalog(), "cluster");
    if (!cluster.ok()) {
      // ToDomain names the fields from "cluster"; say which cluster of the batch it was.
      std::string message(cluster.status().message());
      if (message.rfind("cluster", 0) == 0) message = absl::StrCat(field(), message.substr(7));
      return ToGrpc(absl::Status(cluster.status().code(), message));
    }
    if (cluster->Workers() == 0) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          field(), " is empty: give at least one instance type with a count above 0")));
    }
    std::copy(cluster->counts.begin(), cluster->counts.end(), counts.begin() + i * types);
    servers[i] = cluster->parameter_servers;
    const predictor::Estimate estimate =
        m.Evaluate(absl::MakeConstSpan(counts).subspan(i * types, types), loss, servers[i]);
    if (!estimate.ok()) {
      answer_bytes += ErrorItemBytes(m.ErrorStatus(estimate, loss).message().size());
      continue;
    }
    int present = 0;
    size_t name_bytes = 0;
    if (detailed) {
      for (size_t k = 0; k < types; ++k) {
        if (cluster->counts[k] == 0) continue;
        ++present;
        name_bytes += m.catalog().types[k].name.size();
      }
    }
    answer_bytes += BatchItemBytes(detailed, present, name_bytes);
  }
  // The response message and its wire form must fit the message limit (with room to spare for
  // framing).
  const uint64_t limit = kMaxMessageBytes - 4096;
  if (answer_bytes > limit) {
    const uint64_t per_cluster = answer_bytes / std::max(n, 1);
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "clusters: the answer to %d%s predictions would take about %d bytes, above the %d-byte "
        "message limit; send at most %d clusters per call%s",
        n, detailed ? " detailed" : "", answer_bytes, kMaxMessageBytes, limit / per_cluster,
        detailed ? ", or set detailed = false" : "")));
  }
  // Building the messages takes about twice the wire size, and sending them once more.
  const uint64_t memory = 3 * answer_bytes;
  const bool large = answer_bytes > (1 << 20);
  if (large) {
    if (auto s = ReserveAnswerMemory(context, memory); !s.ok()) return ToGrpc(s);
  }
  struct Release {
    PredictorServiceImpl* self;
    bool large;
    uint64_t memory;
    ~Release() {
      if (!large) return;
      self->ReleaseAnswerMemory(memory);
      // The answer is freed once it is sent, after this handler returns.
      if (memory > (uint64_t{48} << 20)) ReleaseMemorySoon();
    }
  } release{this, large, memory};

  // Pass 2: the answer.
  response->mutable_items()->Reserve(n);
  predictor::Cluster cluster;
  for (int i = 0; i < n; ++i) {
    if (i % 4096 == 4095) {
      if (auto s = stop(); !s.ok()) return ToGrpc(s);
    }
    const absl::Span<const int> c = absl::MakeConstSpan(counts).subspan(i * types, types);
    pb::BatchItem* item = response->add_items();
    const predictor::Estimate estimate = m.Evaluate(c, loss, servers[i]);
    if (!estimate.ok()) {
      const absl::Status status = m.ErrorStatus(estimate, loss);
      item->set_error_code(static_cast<int>(status.code()));
      item->set_error_message(std::string(status.message()));
      continue;
    }
    if (detailed) {
      cluster.counts.assign(c.begin(), c.end());
      cluster.parameter_servers = servers[i];
      auto prediction = m.Predict(cluster, loss);
      if (prediction.ok()) *item->mutable_prediction() = ToProto(*prediction, m.catalog());
    } else {
      pb::Prediction* p = item->mutable_prediction();
      EstimateToProto(estimate, p);
      p->set_parameter_servers(servers[i]);
      p->set_target_loss(loss);
    }
  }
  return grpc::Status::OK;
}

grpc::Status PredictorServiceImpl::LossCurve(grpc::ServerContext*,
                                             const pb::LossCurveRequest* request,
                                             pb::LossCurveResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
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
    if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat("horizon_s is 0, so the curve runs to target_loss's time; ", s.message())));
    }
    auto prediction = m.Predict(*cluster, request->target_loss());
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
