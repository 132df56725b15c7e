// The detector's read side: what callers ask of the registry, the event log and the lifetimes.
// The state machine and the event log's writes are in detector.cc.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "detector/detector.h"

namespace spotdnn::detector {

std::vector<WatchedInstance> Detector::List(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WatchedInstance> out;
  for (const auto& [id, e] : entries_) {
    if (!job_id.empty() && e.stored.instance.job_id != job_id) continue;
    WatchedInstance w = e.stored.instance;
    w.replica = ring_.empty() ? options_.replica_id : ring_.Owner(id);
    out.push_back(std::move(w));
  }
  return out;
}

absl::StatusOr<WatchedInstance> Detector::Get(const std::string& instance_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(instance_id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("instance_id = \"", instance_id, "\": not registered"));
  }
  WatchedInstance w = it->second.stored.instance;
  w.replica = ring_.empty() ? options_.replica_id : ring_.Owner(instance_id);
  return w;
}

absl::StatusOr<std::vector<Lifetime>> Detector::Lifetimes(const std::string& instance_type) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto closed = store_->LoadLifetimes(instance_type, 100000);
  if (!closed.ok()) return closed.status();
  std::vector<Lifetime> out = *std::move(closed);
  const int64_t now = clock_.NowUnixMs();
  for (const auto& [id, e] : entries_) {
    const WatchedInstance& w = e.stored.instance;
    if (w.registered_unix_ms <= 0 || w.state == InstanceState::kNotice ||
        w.state == InstanceState::kRevoked || w.state == InstanceState::kExited) {
      continue;
    }
    if (!instance_type.empty() && w.instance_type != instance_type) continue;
    const bool lost = w.state == InstanceState::kLost;
    out.push_back(
        {.instance_id = id,
         .job_id = w.job_id,
         .instance_type = w.instance_type,
         .started_unix_ms = w.registered_unix_ms,
         .ended_unix_ms = std::max(w.registered_unix_ms, lost ? w.last_heartbeat_unix_ms : now),
         .revoked = false,
         .how = lost ? "lost" : "running"});
  }
  return out;
}

absl::StatusOr<std::vector<Event>> Detector::EventsAfter(uint64_t after, const std::string& job_id,
                                                         size_t max, uint64_t* scanned) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (shared_ && after > next_sequence_ - 1) {
    // A sequence number another replica handed out that this one has not read back yet.
    event_cv_.wait_for(lock, std::chrono::seconds(2),
                       [&] { return shutdown_ || next_sequence_ - 1 >= after; });
  }
  if (after + 1 < first_retained_) {
    return absl::OutOfRangeError(absl::StrCat("after_sequence = ", after, ": events before ",
                                              first_retained_, " were trimmed by the retention of ",
                                              options_.event_retention, " events"));
  }
  const uint64_t newest = next_sequence_ - 1;
  if (after > newest) {
    return absl::OutOfRangeError(absl::StrCat(
        "after_sequence = ", after, ": past the newest event, ", newest,
        " (the detector's event log was reset, or the sequence came from another replica's "
        "log); resume after ",
        newest, " or less"));
  }
  std::vector<Event> out;
  auto it = std::upper_bound(events_.begin(), events_.end(), after,
                             [](uint64_t s, const Event& e) { return s < e.sequence; });
  uint64_t last = after;
  for (; it != events_.end() && out.size() < max; ++it) {
    last = it->sequence;
    if (job_id.empty() || it->job_id == job_id) out.push_back(*it);
  }
  if (scanned != nullptr) *scanned = last;
  return out;
}

bool Detector::WaitForEvents(uint64_t after, absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return event_cv_.wait_for(lock, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)),
                            [&] { return shutdown_ || next_sequence_ - 1 > after; }) &&
         !shutdown_;
}

uint64_t Detector::last_sequence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_sequence_ - 1;
}

size_t Detector::polled() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += e.polled ? 1 : 0;
  return n;
}

size_t Detector::watched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t Detector::store_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_errors_;
}

std::string Detector::last_store_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_store_error_;
}

}  // namespace spotdnn::detector
