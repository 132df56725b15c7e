#include "services/gateway/job/revocation_feed.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace spotdnn::job {

DetectorFeed::DetectorFeed(const clients::DetectorClient& detector, std::string job_id,
                           uint64_t after_sequence)
    : detector_(detector), job_id_(std::move(job_id)) {
  thread_ = std::thread([this, after_sequence] { Follow(after_sequence); });
}

DetectorFeed::~DetectorFeed() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
}

std::vector<FeedItem> DetectorFeed::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FeedItem> out(items_.begin(), items_.end());
  items_.clear();
  return out;
}

void DetectorFeed::Follow(uint64_t after) {
  while (!stop_.load()) {
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_.load()) return;
      context_ = &context;
    }
    pb::WatchEventsRequest request;
    request.set_job_id(job_id_);
    request.set_after_sequence(after);
    auto reader = detector_.Watch(&context, request);
    pb::RevocationEvent event;
    while (reader->Read(&event)) {
      after = std::max<uint64_t>(after, event.sequence());
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(event);
    }
    const grpc::Status finished = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
      if (finished.error_code() == grpc::StatusCode::OUT_OF_RANGE && after > 0) {
        // The detector has no event as new as ours: read its log from the start. Old notices
        // for instances that no longer run change nothing.
        after = 0;
        items_.push_back(std::nullopt);
      }
    }
    if (!stop_.load()) absl::SleepFor(absl::Milliseconds(200));  // the stream broke: resume
  }
}

}  // namespace spotdnn::job
