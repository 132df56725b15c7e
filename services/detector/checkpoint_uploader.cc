#include "services/detector/checkpoint_uploader.h"

#include <algorithm>
#include <string>

#include "services/detector/agent_log.h"

namespace spotdnn::services {

CheckpointUploader::CheckpointUploader(launcher::CheckpointSync* sync, absl::Duration interval,
                                       std::function<bool()> urgent)
    : sync_(sync), interval_(interval), urgent_(std::move(urgent)) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointUploader::~CheckpointUploader() { Stop(); }

void CheckpointUploader::Finish() {
  Stop();
  Round("final");
}

void CheckpointUploader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CheckpointUploader::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const absl::Duration wait = urgent_() ? std::min(interval_, absl::Seconds(1)) : interval_;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(wait), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    Round("periodic");
    lock.lock();
  }
}

void CheckpointUploader::Round(const char* which) {
  absl::StatusOr<launcher::SyncCounts> c = sync_->Upload();
  if (!c.ok()) {
    AgentLogger()->warn("checkpoint upload ({}): {}", which, std::string(c.status().message()));
  } else if (c->files > 0) {
    AgentLogger()->info("checkpoint upload ({}): {} files, {} bytes", which, c->files, c->bytes);
  }
}

}  // namespace spotdnn::services
