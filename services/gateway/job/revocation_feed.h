// A job's revocation events as the detector reports them, for the job controller to take at each
// of its ticks. The detector's feed follows WatchEvents in a background thread and resumes after
// the last event when the stream breaks; tests give the controller a feed of their own.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_REVOCATION_FEED_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_REVOCATION_FEED_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "services/clients/service_clients.h"

namespace spotdnn::job {

namespace pb = ::spotdnn::v1;

// One item of a feed: an event, or std::nullopt when the detector's numbering restarted (its log
// was reset, or this is another replica's): the job reads it from the start and registers its
// running instances again.
using FeedItem = std::optional<pb::RevocationEvent>;

// A source of revocation events.
class RevocationFeed {
 public:
  virtual ~RevocationFeed() = default;
  // What arrived since the last call, oldest first.
  virtual std::vector<FeedItem> Drain() = 0;
};

// WatchEvents of one job on a detector, after `after_sequence`.
class DetectorFeed final : public RevocationFeed {
 public:
  DetectorFeed(const clients::DetectorClient& detector, std::string job_id,
               uint64_t after_sequence);
  // Cancels the stream and waits for the thread.
  ~DetectorFeed() override;
  DetectorFeed(const DetectorFeed&) = delete;
  DetectorFeed& operator=(const DetectorFeed&) = delete;

  std::vector<FeedItem> Drain() override;

 private:
  void Follow(uint64_t after);

  const clients::DetectorClient& detector_;
  const std::string job_id_;
  std::mutex mu_;
  std::deque<FeedItem> items_;              // guarded by mu_
  grpc::ClientContext* context_ = nullptr;  // the stream now open; guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_REVOCATION_FEED_H_
