#include "services/predictor/predictor_service.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "base/limits.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/method_handler.h"
#include "predictor/allreduce.h"
#include "services/common/convert.h"
#include "services/common/request_check.h"
#include "services/common/request_size.h"
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

// The error a batch item answers for an estimate the model could not make: every unusable type of
// the cluster named, or the estimate's own error.
absl::Status ItemError(const predictor::PerformanceModel& m, const predictor::Estimate& estimate,
                       absl::Span<const int> counts, const predictor::Target& target) {
  return estimate.error == predictor::EstimateError::kUnusableType
             ? m.UnusableStatus(counts, estimate.unusable_type)
             : m.ErrorStatus(estimate, target);
}

}  // namespace

size_t BatchItemBytes(bool detailed, int types, size_t name_bytes) {
  // The item's tag and length (4), the prediction's tag and length (4), worker_count and
  // parameter_servers (6 each), twelve doubles of fields 4-15 (9 each) and five of fields 16-20
  // (10 each: the targets and the shared-ps numbers); per type row: its tag and length (3), the
  // name's tag and length (3), count, gpus and batch_size (6 each), six doubles (9 each).
  size_t bytes = 8 + 2 * 6 + 12 * 9 + 5 * 10;
  if (detailed) bytes += static_cast<size_t>(types) * (3 + 3 + 3 * 6 + 6 * 9) + name_bytes;
  return bytes;
}

PredictorServiceImpl::PredictorServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                           PredictorOptions options)
    : models_(std::move(registry)), options_(options) {
  // PredictBatch reads raw bytes (see the class comment); gRPC's server only needs a method that
  // does not read its message up front, which a streamed unary one is.
  const google::protobuf::MethodDescriptor* method =
      google::protobuf::DescriptorPool::generated_pool()
          ->FindServiceByName(pb::Predictor::service_full_name())
          ->FindMethodByName("PredictBatch");
  MarkMethodStreamed(
      method->index(),
      new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, pb::PredictBatchResponse>(
          [this](grpc::ServerContext* context,
                 grpc::ServerUnaryStreamer<grpc::ByteBuffer, pb::PredictBatchResponse>* stream) {
            return PredictBatchRaw(context, stream);
          }));
  // The other methods refuse a request larger than their limits allow before parsing it. The
  // predictor does not read a catalog's lifetimes (the provisioner's risk model does) or zones
  // (the provisioner places plans): they do not raise its limits.
  for (auto [index, handler] :
       RequestSizeLimits<pb::Predictor::Service>(this, pb::Predictor::service_full_name())
           .Unused({"spotdnn.v1.InstanceType.lifetimes", "spotdnn.v1.InstanceType.zones"})
           .Unary("Predict", &pb::Predictor::Service::Predict)
           .Unary("LossCurve", &pb::Predictor::Service::LossCurve)
           .Unary("ListCatalogs", &pb::Predictor::Service::ListCatalogs)
           .Unary("ListWorkloads", &pb::Predictor::Service::ListWorkloads)
           .Take()) {
    MarkMethodStreamed(index, handler);
  }
}

grpc::Status PredictorServiceImpl::Predict(grpc::ServerContext*, const pb::PredictRequest* request,
                                           pb::PredictResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  auto target = TargetOfMessage(*request);
  if (!target.ok()) return ToGrpc(target.status());
  if (target->is_loss() && !request->has_target_metric()) {
    if (auto s = CheckTargetLoss(request->target_loss()); !s.ok()) return ToGrpc(s);
  }
  if (request->sync() != pb::SYNC_KIND_PS) {
    auto loaded = models_.Load(request->workload(), request->catalog());
    if (!loaded.ok()) return ToGrpc(loaded.status());
    if (request->sync() == pb::SYNC_KIND_ALLREDUCE ||
        loaded->first.sync() == pb::SYNC_KIND_ALLREDUCE) {
      return ToGrpc(PredictAllReduce(*request, loaded->first, loaded->second, *target, response));
    }
  }
  if (request->global_batch_mode() != pb::GLOBAL_BATCH_UNSPECIFIED) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("global_batch_mode = ", EnumLabel(request->global_batch_mode()),
                     ": a parameter-server workload takes its batch from the profile; the global "
                     "batch's mode is for a synchronous (all-reduce) one")));
  }
  if (request->local_batch() != 0 || request->global_batch() != 0) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        request->local_batch() != 0 ? "local_batch = " : "global_batch = ",
        request->local_batch() != 0 ? request->local_batch() : request->global_batch(),
        ": a parameter-server workload takes its batch from the profile; a local or global "
        "batch is for a synchronous (all-reduce) one")));
  }
  auto model = models_.Resolve(request->workload(), request->catalog(),
                               {.require_loss_model = target->is_loss()});
  if (!model.ok()) return ToGrpc(model.status());
  auto cluster = ToDomain(request->cluster(), (*model)->catalog());
  if (!cluster.ok()) return ToGrpc(cluster.status());
  auto prediction = (*model)->Predict(*cluster, *target);
  if (!prediction.ok()) return ToGrpc(prediction.status());
  *response->mutable_prediction() = ToProto(*prediction, (*model)->catalog());
  SetTargetOf(*request, response->mutable_prediction());
  response->set_workload((*model)->profile().name);
  response->set_catalog((*model)->catalog().name);
  return grpc::Status::OK;
}

absl::Status PredictorServiceImpl::PredictAllReduce(const pb::PredictRequest& request,
                                                    const pb::WorkloadProfile& workload,
                                                    const pb::InstanceCatalog& instance_catalog,
                                                    const predictor::Target& target,
                                                    pb::PredictResponse* response) const {
  predictor::WorkloadProfile profile = ToDomain(workload);
  // The request's --sync allreduce, or the profile's own kind.
  profile.sync = predictor::SyncKind::kAllReduce;
  // The request's global batch mode; else a global batch given makes it fixed; else the
  // profile's.
  if (request.global_batch_mode() == pb::GLOBAL_BATCH_SCALE) {
    profile.global_batch = predictor::GlobalBatch::kScale;
  } else if (request.global_batch_mode() == pb::GLOBAL_BATCH_FIXED || request.global_batch() != 0) {
    profile.global_batch = predictor::GlobalBatch::kFixed;
  }
  if (auto s = profile.Validate(); !s.ok()) return s;
  const predictor::InstanceCatalog catalog = ToDomain(instance_catalog);
  if (auto s = catalog.Validate(); !s.ok()) return s;
  auto cluster = ToDomain(request.cluster(), catalog);
  if (!cluster.ok()) return cluster.status();
  auto prediction = predictor::PredictAllReduce(profile, catalog, *cluster, target,
                                                request.local_batch(), request.global_batch());
  if (!prediction.ok()) return prediction.status();
  *response->mutable_prediction() = ToProto(*prediction, catalog);
  SetTargetOf(request, response->mutable_prediction());
  response->set_workload(profile.name);
  response->set_catalog(catalog.name);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PredictorServiceImpl::ReserveBatchMemory(
    const grpc::ServerContext* context, uint64_t bytes) {
  const uint64_t budget = options_.max_batch_memory_bytes;
  bytes = std::min(bytes, budget);  // a call alone always gets it
  const auto deadline = context->deadline();
  absl::Time until = absl::Now() + options_.max_call_time;
  if (deadline != std::chrono::system_clock::time_point::max()) {
    until = std::min(until, absl::FromChrono(deadline));
  }
  absl::MutexLock lock(&memory_mu_);
  while (batch_memory_in_use_ + bytes > budget) {
    if (context->IsCancelled()) return absl::CancelledError("the call was cancelled");
    if (absl::Now() >= until) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the server is busy with other large batches (%d of the %d bytes it gives them are in "
          "use; this one needs about %d): retry later, or send fewer clusters per call",
          batch_memory_in_use_, budget, bytes));
    }
    memory_cv_.WaitWithDeadline(&memory_mu_,
                                std::min(until, absl::Now() + absl::Milliseconds(100)));
  }
  batch_memory_in_use_ += bytes;
  return bytes;
}

void PredictorServiceImpl::ReleaseBatchMemory(uint64_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock lock(&memory_mu_);
  batch_memory_in_use_ -= std::min(batch_memory_in_use_, bytes);
  memory_cv_.SignalAll();
}

absl::Status PredictorServiceImpl::BatchMemory::Hold(const grpc::ServerContext* context,
                                                     uint64_t bytes) {
  service_->ReleaseBatchMemory(held_);
  held_ = 0;
  auto taken = service_->ReserveBatchMemory(context, bytes);
  if (!taken.ok()) return taken.status();
  held_ = *taken;
  return absl::OkStatus();
}

namespace {

// A PredictBatchRequest split without parsing its clusters: every other field in `head`, each
// cluster as its place in the request's bytes. False when the bytes are not a PredictBatchRequest.
bool SplitBatchRequest(const std::string& wire, pb::PredictBatchRequest* head,
                       std::vector<std::pair<uint32_t, uint32_t>>* clusters) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const uint8_t*>(wire.data()),
                                               static_cast<int>(wire.size()));
  std::string rest;
  {
    google::protobuf::io::StringOutputStream rest_stream(&rest);
    google::protobuf::io::CodedOutputStream out(&rest_stream);
    while (true) {
      const uint32_t tag = input.ReadTag();
      if (tag == 0) break;
      if (WireFormatLite::GetTagFieldNumber(tag) == pb::PredictBatchRequest::kClustersFieldNumber &&
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t length = 0;
        if (!input.ReadVarint32(&length)) return false;
        const int at = input.CurrentPosition();
        if (!input.Skip(static_cast<int>(length))) return false;
        clusters->emplace_back(static_cast<uint32_t>(at), length);
        continue;
      }
      if (!WireFormatLite::SkipField(&input, tag, &out)) return false;
    }
    if (!input.ConsumedEntireMessage()) return false;
  }
  return head->ParseFromString(rest);
}

}  // namespace

grpc::Status PredictorServiceImpl::PredictBatchRaw(
    grpc::ServerContext* context,
    grpc::ServerUnaryStreamer<grpc::ByteBuffer, pb::PredictBatchResponse>* stream) {
  const std::string unparsable = UnparsableRequestMessage("/spotdnn.v1.Predictor/PredictBatch");
  grpc::ByteBuffer buffer;
  if (!stream->Read(&buffer)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, unparsable);
  }
  BatchMemory memory(this);
  // While the request is read: its bytes (gRPC's and a copy) and the compact counts.
  if (auto s = memory.Hold(context, 3 * uint64_t{buffer.Length()}); !s.ok()) return ToGrpc(s);
  std::string wire;
  {
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, unparsable);
    }
    wire.reserve(buffer.Length());
    for (const grpc::Slice& slice : slices) {
      wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  buffer.Clear();
  pb::PredictBatchRequest request;
  std::vector<std::pair<uint32_t, uint32_t>> places;
  if (!SplitBatchRequest(wire, &request, &places)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, unparsable);
  }
  // A large request's memory goes back to the system once it is freed, answered or refused.
  struct TrimAfter {
    bool large;
    ~TrimAfter() {
      if (large) ReleaseMemorySoon();
    }
  } trim_after{wire.size() >= (4u << 20)};

  if (auto s = CheckRequest(request); !s.ok()) return ToGrpc(s);
  auto target = TargetOfMessage(request);
  if (!target.ok()) return ToGrpc(target.status());
  if (target->is_loss() && !request.has_target_metric()) {
    if (auto s = CheckTargetLoss(request.target_loss()); !s.ok()) return ToGrpc(s);
  }
  const int n = static_cast<int>(places.size());
  if (places.size() > static_cast<size_t>(kMaxBatchClusters)) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "clusters: %d given, at most %d per call", places.size(), kMaxBatchClusters)));
  }
  auto model = models_.Resolve(request.workload(), request.catalog(),
                               {.require_loss_model = target->is_loss()});
  if (!model.ok()) return ToGrpc(model.status());
  const predictor::PerformanceModel& m = **model;
  const double loss = target->is_loss() ? target->value : 0;
  if (target->is_loss() && m.profile().loss && !(loss > m.profile().loss->g5)) {
    return ToGrpc(m.ErrorStatus({.error = predictor::EstimateError::kTargetAtOrBelowFloor}, loss));
  }
  const std::function<absl::Status()> stop =
      CallStopCheck(context, options_.max_call_time, "the batch", "the server's call time limit");
  const bool detailed = request.detailed();
  const size_t types = m.catalog().types.size();
  // Pass 1: parse and validate every cluster before answering any (bad input fails the whole
  // call), and bound the answer's size so that one too big for a message is refused before it is
  // built.
  std::vector<int> counts(static_cast<size_t>(n) * types);
  std::vector<int> servers(n);
  uint64_t answer_bytes = 16;
  // The stop check runs every few million steps of work (a cluster costs its types, and a type
  // lookup per instance), so that huge catalogs or clusters cannot run long between checks.
  uint64_t work = 0;
  auto poll = [&](uint64_t steps) -> absl::Status {
    work += steps;
    if (work < (uint64_t{1} << 22)) return absl::OkStatus();
    work = 0;
    return stop();
  };
  pb::Cluster c;
  for (int i = 0; i < n; ++i) {
    if (auto s = poll(types * (1 + static_cast<uint64_t>(places[i].second) / 4)); !s.ok()) {
      return ToGrpc(s);
    }
    auto field = [i] { return absl::StrCat("clusters[", i, "]"); };
    if (!c.ParseFromArray(wire.data() + places[i].first, static_cast<int>(places[i].second))) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          field(),
          " could not be parsed as a spotdnn.v1.Cluster (malformed protobuf bytes, or a "
          "string field that is not valid UTF-8)")));
    }
    // CheckRequest's limits, by hand (reflection would cost more than the prediction).
    if (static_cast<size_t>(c.instances_size()) > limits::kMaxRepeatedEntries) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrFormat("%s.instances: %d entries, at most %d", field(), c.instances_size(),
                          limits::kMaxRepeatedEntries)));
    }
    for (int k = 0; k < c.instances_size(); ++k) {
      const std::string& name = c.instances(k).instance_type();
      if (name.size() > limits::kMaxNameBytes) {
        return ToGrpc(absl::InvalidArgumentError(
            limits::LengthError(absl::StrCat(field(), ".instances[", k, "].instance_type"), name,
                                limits::kMaxNameBytes)));
      }
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
        m.Evaluate(absl::MakeConstSpan(counts).subspan(i * types, types), *target, servers[i]);
    if (!estimate.ok()) {
      answer_bytes += ErrorItemBytes(
          ItemError(m, estimate, absl::MakeConstSpan(counts).subspan(i * types, types), *target)
              .message()
              .size());
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
  std::string().swap(wire);
  std::vector<std::pair<uint32_t, uint32_t>>().swap(places);
  // The answer must fit the message limit (with room to spare for framing).
  const uint64_t limit = kMaxMessageBytes - 4096;
  if (answer_bytes > limit) {
    const uint64_t per_cluster = std::max<uint64_t>(1, answer_bytes / std::max(n, 1));
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "clusters: the answer to %d%s predictions would take about %d bytes, above the %d-byte "
        "message limit; send at most %d clusters per call%s",
        n, detailed ? " detailed" : "", answer_bytes, kMaxMessageBytes, limit / per_cluster,
        detailed ? ", or set detailed = false" : "")));
  }
  // Building the messages takes about twice the wire size, and sending them once more.
  if (auto s = memory.Hold(context, 3 * answer_bytes); !s.ok()) return ToGrpc(s);

  // Pass 2: the answer.
  pb::PredictBatchResponse response;
  response.mutable_items()->Reserve(n);
  predictor::Cluster cluster;
  for (int i = 0; i < n; ++i) {
    if (auto s = poll(types * (detailed ? 4 : 1)); !s.ok()) return ToGrpc(s);
    const absl::Span<const int> k = absl::MakeConstSpan(counts).subspan(i * types, types);
    pb::BatchItem* item = response.add_items();
    const predictor::Estimate estimate = m.Evaluate(k, *target, servers[i]);
    if (!estimate.ok()) {
      const absl::Status status = ItemError(m, estimate, k, *target);
      item->set_error_code(static_cast<int>(status.code()));
      item->set_error_message(std::string(status.message()));
      continue;
    }
    if (detailed) {
      cluster.counts.assign(k.begin(), k.end());
      cluster.parameter_servers = servers[i];
      auto prediction = m.Predict(cluster, *target);
      if (prediction.ok()) *item->mutable_prediction() = ToProto(*prediction, m.catalog());
    } else {
      pb::Prediction* p = item->mutable_prediction();
      EstimateToProto(estimate, p);
      p->set_parameter_servers(servers[i]);
    }
    SetTargetOf(request, item->mutable_prediction());
  }
  std::vector<int>().swap(counts);
  if (!stream->Write(response)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the answer could not be sent");
  }
  if (answer_bytes > (16u << 20)) ReleaseMemorySoon();
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
    auto target = TargetOfMessage(*request);
    if (!target.ok()) return ToGrpc(target.status());
    if (target->is_loss() && !request->has_target_metric()) {
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
