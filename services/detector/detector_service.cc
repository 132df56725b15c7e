#include "services/detector/detector_service.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "services/common/convert.h"
#include "services/common/request_check.h"
#include "services/common/request_size.h"
#include "services/common/server.h"
#include "spdlog/spdlog.h"

namespace spotdnn::services {
namespace {

namespace d = ::spotdnn::detector;

// Counts a call in `counter` for its lifetime.
class StreamCount {
 public:
  explicit StreamCount(std::atomic<int>& counter) : counter_(counter) { ++counter_; }
  ~StreamCount() { --counter_; }

 private:
  std::atomic<int>& counter_;
};

pb::InstanceState ToProto(d::InstanceState s) { return static_cast<pb::InstanceState>(s); }

pb::RevocationEvent::Kind ToProto(d::EventKind k) {
  return static_cast<pb::RevocationEvent::Kind>(k);
}

}  // namespace

pb::Cloud ToProto(d::Cloud cloud) { return static_cast<pb::Cloud>(cloud); }
d::Cloud ToDomain(pb::Cloud cloud) {
  switch (cloud) {
    case pb::CLOUD_AWS:
      return d::Cloud::kAws;
    case pb::CLOUD_GCE:
      return d::Cloud::kGce;
    case pb::CLOUD_AZURE:
      return d::Cloud::kAzure;
    default:
      return d::Cloud::kUnspecified;
  }
}

pb::WatchedInstance ToProto(const d::WatchedInstance& w) {
  pb::WatchedInstance p;
  p.set_instance_id(w.instance_id);
  p.set_job_id(w.job_id);
  p.set_cloud(ToProto(w.cloud));
  p.set_metadata_endpoint(w.metadata_endpoint);
  p.set_state(ToProto(w.state));
  p.set_reason(w.reason);
  p.set_last_heartbeat_unix_ms(w.last_heartbeat_unix_ms);
  p.set_replica(w.replica);
  p.set_instance_type(w.instance_type);
  p.set_registered_unix_ms(w.registered_unix_ms);
  return p;
}

d::WatchedInstance ToDomain(const pb::WatchedInstance& p) {
  d::WatchedInstance w;
  w.instance_id = p.instance_id();
  w.job_id = p.job_id();
  w.cloud = ToDomain(p.cloud());
  w.metadata_endpoint = p.metadata_endpoint();
  w.instance_type = p.instance_type();
  return w;
}

pb::RevocationEvent ToProto(const d::Event& e) {
  pb::RevocationEvent p;
  p.set_sequence(e.sequence);
  p.set_instance_id(e.instance_id);
  p.set_job_id(e.job_id);
  p.set_cloud(ToProto(e.cloud));
  p.set_kind(ToProto(e.kind));
  p.set_action(e.action);
  p.set_notice_unix_ms(e.notice_unix_ms);
  p.set_effective_unix_ms(e.effective_unix_ms);
  p.set_detail(e.detail);
  if (e.kind == d::EventKind::kExited) {
    const d::CommandExit exit = d::ExitOf(e.action, e.detail);
    p.set_exit_status(exit.status);
    p.set_detail(exit.how);
    for (const std::string& line : exit.last_lines) p.add_last_lines(line);
  }
  return p;
}

DetectorServiceImpl::DetectorServiceImpl(std::shared_ptr<d::Detector> detector)
    : detector_(std::move(detector)) {
  // AgentStream reads raw messages (see the class comment).
  const google::protobuf::MethodDescriptor* method =
      google::protobuf::DescriptorPool::generated_pool()
          ->FindServiceByName(pb::Detector::service_full_name())
          ->FindMethodByName("AgentStream");
  MarkMethodStreamed(
      method->index(),
      new grpc::internal::BidiStreamingHandler<DetectorServiceImpl, grpc::ByteBuffer, pb::AgentAck>(
          [](DetectorServiceImpl* self, grpc::ServerContext* context,
             grpc::ServerReaderWriter<pb::AgentAck, grpc::ByteBuffer>* stream) {
            return self->AgentStreamRaw(context, stream);
          },
          this));
  // The unary methods refuse a request larger than their limits allow before parsing it.
  for (auto [index, handler] :
       RequestSizeLimits<pb::Detector::Service>(this, pb::Detector::service_full_name())
           .Unary("RegisterInstance", &pb::Detector::Service::RegisterInstance)
           .Unary("UnregisterInstance", &pb::Detector::Service::UnregisterInstance)
           .Unary("ListInstances", &pb::Detector::Service::ListInstances)
           .Unary("ReplicaStatus", &pb::Detector::Service::ReplicaStatus)
           .Unary("ListLifetimes", &pb::Detector::Service::ListLifetimes)
           .Take()) {
    MarkMethodStreamed(index, handler);
  }
}

DetectorServiceImpl::~DetectorServiceImpl() { Stop(); }

void DetectorServiceImpl::Stop() { stopped_ = true; }

std::vector<std::string> DetectorServiceImpl::LiveReplicas() const {
  std::vector<std::string> live = detector_->LiveReplicas();
  if (live.empty()) live.push_back(detector_->replica_id());
  return live;
}

grpc::Status DetectorServiceImpl::RegisterInstance(grpc::ServerContext*,
                                                   const pb::RegisterInstanceRequest* request,
                                                   pb::RegisterInstanceResponse*) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (!request->has_instance()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "instance: missing");
  }
  return ToGrpc(detector_->Register(ToDomain(request->instance())));
}

grpc::Status DetectorServiceImpl::UnregisterInstance(grpc::ServerContext*,
                                                     const pb::UnregisterInstanceRequest* request,
                                                     pb::UnregisterInstanceResponse*) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  return ToGrpc(detector_->Unregister(request->instance_id()));
}

grpc::Status DetectorServiceImpl::AgentStreamRaw(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::AgentAck, grpc::ByteBuffer>* stream) {
  pb::AgentReport report;
  grpc::ByteBuffer buffer;
  uint64_t index = 0;
  for (; !stopped_ && stream->Read(&buffer); ++index) {
    report.Clear();
    grpc::ProtoBufferReader reader(&buffer);
    if (!reader.status().ok() || !report.ParseFromZeroCopyStream(&reader)) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "reports[", index,
          "] could not be parsed as a spotdnn.v1.AgentReport (malformed protobuf bytes, or a "
          "string field that is not valid UTF-8); the ",
          index, " reports before it were taken and acknowledged")));
    }
    if (auto s = CheckRequest(report, absl::StrCat("reports[", index, "]")); !s.ok()) {
      return ToGrpc(s);
    }
    const d::Cloud cloud = ToDomain(report.cloud());
    absl::Status s;
    if (report.report_case() == pb::AgentReport::kEvent) {
      const pb::RevocationEvent& e = report.event();
      d::Notice n;
      if (e.kind() == pb::RevocationEvent::KIND_EXITED) {
        n = d::ExitNotice({.status = e.exit_status(),
                           .how = e.detail(),
                           .last_lines = {e.last_lines().begin(), e.last_lines().end()}});
      } else {
        n.kind = static_cast<d::EventKind>(e.kind());
        n.action = e.action();
        n.effective_unix_ms = e.effective_unix_ms();
        n.detail = e.detail();
      }
      n.key = report.notice_key();
      s = detector_->ReportNotice(report.instance_id(), report.job_id(), cloud, n,
                                  e.notice_unix_ms());
    } else {
      s = detector_->Heartbeat(report.instance_id(), report.job_id(), cloud, report.unix_ms(),
                               report.problem());
    }
    if (!s.ok()) return ToGrpc(s);
    pb::AgentAck ack;
    ack.set_unix_ms(base::RealClock::Get().NowUnixMs());
    ack.set_replica(detector_->replica_id());
    if (!stream->Write(ack)) break;
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  return grpc::Status::OK;
}

grpc::Status DetectorServiceImpl::WatchEvents(grpc::ServerContext* context,
                                              const pb::WatchEventsRequest* request,
                                              grpc::ServerWriter<pb::RevocationEvent>* writer) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  StreamCount count(open_streams_);
  uint64_t cursor = request->after_sequence();
  bool opened = false;
  while (!context->IsCancelled() && !stopped_) {
    uint64_t scanned = cursor;
    auto events = detector_->EventsAfter(cursor, request->job_id(), 256, &scanned);
    // A resume point past the newest event or trimmed away is OUT_OF_RANGE before the stream
    // opens (later rounds start from what this stream scanned, so they cannot fail that way).
    if (!events.ok()) return ToGrpc(events.status());
    if (!opened) {
      // Tells the subscriber at once that the stream is up, before any event (clients tell an
      // unreachable detector from a quiet one by it).
      context->AddInitialMetadata(std::string(kWatchOpenedHeader),
                                  std::to_string(detector_->last_sequence()));
      writer->SendInitialMetadata();
      opened = true;
    }
    for (const d::Event& e : *events) {
      if (!writer->Write(ToProto(e))) return grpc::Status::OK;  // the subscriber left
    }
    cursor = scanned;  // events of other jobs were looked at too
    if (events->size() < 256) detector_->WaitForEvents(cursor, absl::Milliseconds(200));
  }
  return grpc::Status::OK;
}

grpc::Status DetectorServiceImpl::ListInstances(grpc::ServerContext*,
                                                const pb::ListInstancesRequest* request,
                                                pb::ListInstancesResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  for (const d::WatchedInstance& w : detector_->List(request->job_id())) {
    *response->add_instances() = ToProto(w);
  }
  return grpc::Status::OK;
}

grpc::Status DetectorServiceImpl::ListLifetimes(grpc::ServerContext*,
                                                const pb::ListLifetimesRequest* request,
                                                pb::ListLifetimesResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  auto lifetimes = detector_->Lifetimes(request->instance_type());
  if (!lifetimes.ok()) return ToGrpc(lifetimes.status());
  for (const d::Lifetime& l : *lifetimes) {
    pb::InstanceLifetime* p = response->add_lifetimes();
    p->set_instance_id(l.instance_id);
    p->set_job_id(l.job_id);
    p->set_instance_type(l.instance_type);
    p->set_started_unix_ms(l.started_unix_ms);
    p->set_ended_unix_ms(l.ended_unix_ms);
    p->set_revoked(l.revoked);
    p->set_how(l.how);
  }
  response->set_replica(detector_->replica_id());
  return grpc::Status::OK;
}

grpc::Status DetectorServiceImpl::ReplicaStatus(grpc::ServerContext*,
                                                const pb::ReplicaStatusRequest*,
                                                pb::ReplicaStatusResponse* response) {
  response->set_replica(detector_->replica_id());
  response->set_instances(detector_->List("").size());
  response->set_polled(detector_->polled());
  response->set_last_sequence(detector_->last_sequence());
  for (const std::string& r : LiveReplicas()) response->add_live_replicas(r);
  response->set_store_errors(detector_->store_errors());
  response->set_last_store_error(detector_->last_store_error());
  response->set_shared(detector_->shared());
  response->set_serving(detector_->serving());
  response->set_lease_changes(detector_->lease_changes());
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
