// The gRPC edge of the revocation detector: converts spotdnn.v1 messages to the detector core's
// types, streams events to subscribers and takes agents' streams. Replicas share nothing here:
// on a PostgreSQL store they share the database (see detector::Detector).
#ifndef SPOTDNN_SERVICES_DETECTOR_DETECTOR_SERVICE_H_
#define SPOTDNN_SERVICES_DETECTOR_DETECTOR_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "detector/detector.h"
#include "grpcpp/support/byte_buffer.h"
#include "spotdnn/v1/detector.grpc.pb.h"

namespace spotdnn::services {

namespace pb = ::spotdnn::v1;

pb::WatchedInstance ToProto(const detector::WatchedInstance& instance);
detector::WatchedInstance ToDomain(const pb::WatchedInstance& instance);
pb::RevocationEvent ToProto(const detector::Event& event);
pb::Cloud ToProto(detector::Cloud cloud);
detector::Cloud ToDomain(pb::Cloud cloud);

// Initial metadata a WatchEvents stream sends as soon as it is open (before any event): the
// detector's newest sequence then. A subscriber that got it reached the detector.
inline constexpr std::string_view kWatchOpenedHeader = "spotdnn-watch-last-sequence";

// The Detector service. Every request is checked against the limits of base/limits.h
// (ids and keys at most 256 bytes, detail and problem at most 1,024, known enum values) before
// the detector sees it. AgentStream reads its stream as raw messages and parses each itself, so
// that one that cannot be parsed ends the stream with INVALID_ARGUMENT naming it instead of
// looking like the end of the stream.
class DetectorServiceImpl final : public pb::Detector::Service {
 public:
  explicit DetectorServiceImpl(std::shared_ptr<detector::Detector> detector);
  ~DetectorServiceImpl() override;

  // Ends open WatchEvents and AgentStream streams. Idempotent.
  void Stop();
  // Replicas alive now (this one included), sorted: the leases' holders on a shared store.
  std::vector<std::string> LiveReplicas() const;
  // WatchEvents and AgentStream calls being served now.
  int open_streams() const { return open_streams_.load(); }

  grpc::Status RegisterInstance(grpc::ServerContext* context,
                                const pb::RegisterInstanceRequest* request,
                                pb::RegisterInstanceResponse* response) override;
  grpc::Status UnregisterInstance(grpc::ServerContext* context,
                                  const pb::UnregisterInstanceRequest* request,
                                  pb::UnregisterInstanceResponse* response) override;
  // Serves AgentStream: each report is acknowledged once the detector took it.
  grpc::Status AgentStreamRaw(grpc::ServerContext* context,
                              grpc::ServerReaderWriter<pb::AgentAck, grpc::ByteBuffer>* stream);
  // Streams events after request.after_sequence: OUT_OF_RANGE (naming both numbers) when that is
  // past the newest event or was trimmed; otherwise sends kWatchOpenedHeader at once.
  grpc::Status WatchEvents(grpc::ServerContext* context, const pb::WatchEventsRequest* request,
                           grpc::ServerWriter<pb::RevocationEvent>* writer) override;
  grpc::Status ListInstances(grpc::ServerContext* context, const pb::ListInstancesRequest* request,
                             pb::ListInstancesResponse* response) override;
  grpc::Status ReplicaStatus(grpc::ServerContext* context, const pb::ReplicaStatusRequest* request,
                             pb::ReplicaStatusResponse* response) override;
  grpc::Status ListLifetimes(grpc::ServerContext* context, const pb::ListLifetimesRequest* request,
                             pb::ListLifetimesResponse* response) override;

 private:
  std::shared_ptr<detector::Detector> detector_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> open_streams_{0};
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_DETECTOR_SERVICE_H_
