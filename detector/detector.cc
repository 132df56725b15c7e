#include "detector/detector.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/common/limits.h"
#include "services/common/metrics.h"

namespace spotdnn::detector {

namespace {

// The detector's metrics in the process's registry.
struct DetectorMetrics {
  metrics::Family<metrics::Counter>& polls = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_polls_total",
      "rounds of polling an instance's metadata service, by cloud and result (healthy: every "
      "check answered and parsed)",
      {"cloud", "result"});
  metrics::Family<metrics::Counter>& notices = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_notices_total",
      "notices recorded as events (each once), by cloud and kind (notice, rebalance, maintenance)",
      {"cloud", "kind"});
  metrics::Histogram& notice_latency =
      metrics::DefaultRegistry()
          .Histograms("spotdnn_detector_notice_latency_seconds",
                      "from a notice being read from the metadata service (by this replica's "
                      "poll, or by an agent, on its clock) to its event being recorded",
                      {}, {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10, 30})
          .WithLabels({});
};

DetectorMetrics& Metrics() {
  static DetectorMetrics* m = new DetectorMetrics();  // lives as long as the process
  return *m;
}

// INVALID_ARGUMENT naming the first of `fields` (name, value, limit) over its limit.
absl::Status CheckLengths(
    std::initializer_list<std::tuple<const char*, const std::string*, size_t>> fields) {
  for (const auto& [name, value, limit] : fields) {
    if (value->size() > limit) {
      return absl::InvalidArgumentError(limits::LengthError(name, *value, limit));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Detector::Detector(DetectorOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Detector>> Detector::Open(DetectorOptions options) {
  if (options.lost_after_intervals < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lost_after_intervals = ", options.lost_after_intervals, ": must be at least 1"));
  }
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat_interval = ", absl::FormatDuration(options.heartbeat_interval),
                     ": must be positive"));
  }
  if (options.poller.interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "poll interval = ", absl::FormatDuration(options.poller.interval), ": must be positive"));
  }
  if (options.replica_id.empty()) {
    return absl::InvalidArgumentError("replica_id = \"\": must not be empty");
  }
  if (options.event_retention == 0) options.event_retention = 1;
  std::unique_ptr<Detector> d(new Detector(std::move(options)));
  auto store = DetectorStore::Open(d->options_.db_path);
  if (!store.ok()) return store.status();
  d->store_ = *std::move(store);
  if (d->options_.run_poller) {
    Detector* self = d.get();
    d->poller_ = std::make_unique<MetadataPoller>(
        d->options_.poller, [self](const PollResult& r) { self->HandlePollResult(r); });
    if (auto s = d->poller_->Start(); !s.ok()) return s;
  }
  if (auto s = d->Load(); !s.ok()) return s;
  d->monitor_ = std::thread([self = d.get()] { self->MonitorLoop(); });
  return d;
}

Detector::~Detector() { Shutdown(); }

absl::Status Detector::Load() {
  auto instances = store_->LoadInstances();
  if (!instances.ok()) return instances.status();
  auto seen = store_->LoadSeen();
  if (!seen.ok()) return seen.status();
  auto events = store_->LoadEvents(options_.event_retention);
  if (!events.ok()) return events.status();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = NowUnixMs();
  for (StoredInstance& i : *instances) {
    Entry& e = entries_[i.instance.instance_id];
    e.stored = std::move(i);
    // Agents get a full lost-after period to reconnect to a restarted detector.
    e.stored.instance.last_heartbeat_unix_ms =
        std::max(e.stored.instance.last_heartbeat_unix_ms, now);
  }
  for (auto& [id, key] : *seen) {
    if (auto it = entries_.find(id); it != entries_.end()) it->second.seen.insert(key);
  }
  events_.assign(events->begin(), events->end());
  if (!events_.empty()) {
    next_sequence_ = events_.back().sequence + 1;
    first_retained_ = events_.front().sequence;
  }
  for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
  return absl::OkStatus();
}

void Detector::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  event_cv_.notify_all();
  stop_cv_.notify_all();
  if (poller_) poller_->Stop();  // not under mu_: the poller's sink takes it
  if (monitor_.joinable()) monitor_.join();
}

bool Detector::HoldsLocked(const std::string& instance_id) const {
  return ring_.empty() || ring_.Owner(instance_id) == options_.replica_id;
}

void Detector::ReconcilePollingLocked(Entry& e) {
  const bool want = poller_ && !shutdown_ && !e.stored.instance.metadata_endpoint.empty() &&
                    HoldsLocked(e.stored.instance.instance_id) &&
                    e.stored.instance.state != InstanceState::kRevoked;
  if (want && !e.polled) {
    e.polled = poller_
                   ->Add({e.stored.instance.instance_id, e.stored.instance.cloud,
                          e.stored.instance.metadata_endpoint})
                   .ok();
  } else if (!want && e.polled) {
    poller_->Remove(e.stored.instance.instance_id);
    e.polled = false;
  }
}

absl::Status Detector::Register(const WatchedInstance& instance) {
  if (instance.instance_id.empty()) {
    return absl::InvalidArgumentError("instance.instance_id = \"\": must not be empty");
  }
  if (auto s = CheckLengths(
          {{"instance.instance_id", &instance.instance_id, limits::kMaxNameBytes},
           {"instance.job_id", &instance.job_id, limits::kMaxNameBytes},
           {"instance.instance_type", &instance.instance_type, limits::kMaxNameBytes},
           {"instance.metadata_endpoint", &instance.metadata_endpoint, limits::kMaxTextBytes}});
      !s.ok()) {
    return s;
  }
  if (!instance.metadata_endpoint.empty()) {
    if (auto s = ValidateEndpoint("instance.metadata_endpoint", instance.metadata_endpoint);
        !s.ok()) {
      return s;
    }
    if (instance.cloud == Cloud::kUnspecified) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance.cloud = unspecified: instance \"", instance.instance_id,
                       "\" has a metadata_endpoint, so its cloud (aws, gce or azure) is needed"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.try_emplace(instance.instance_id);
  Entry& e = it->second;
  WatchedInstance& w = e.stored.instance;
  // See the header: only a new lifetime resets; an idempotent re-registration must not make an
  // already reported notice reportable again.
  const InstanceState was = w.state;
  const bool ended = was == InstanceState::kRevoked || was == InstanceState::kLost;
  const bool endpoint_changed = !w.metadata_endpoint.empty() &&
                                !instance.metadata_endpoint.empty() &&
                                w.metadata_endpoint != instance.metadata_endpoint;
  const bool cloud_changed = w.cloud != Cloud::kUnspecified &&
                             instance.cloud != Cloud::kUnspecified && instance.cloud != w.cloud;
  const bool reset = !inserted && (ended || endpoint_changed || cloud_changed);
  if (reset && was != InstanceState::kNotice && was != InstanceState::kRevoked) {
    // A revoked lifetime was recorded at its notice; any other ends here, censored.
    const bool lost = was == InstanceState::kLost;
    EndLifetimeLocked(e, lost ? w.last_heartbeat_unix_ms : NowUnixMs(), false,
                      lost ? "lost" : "registered again");
  }
  if (inserted || reset) {
    w.registered_unix_ms = NowUnixMs();
    w.instance_id = instance.instance_id;
    w.state = InstanceState::kUnknown;
    w.reason = inserted
                   ? "registered; no poll or heartbeat yet"
                   : absl::StrCat("registered again (was ", std::string(InstanceStateName(was)),
                                  "); no poll or heartbeat yet");
    w.last_heartbeat_unix_ms = NowUnixMs();
    e.stored.notice_effective_unix_ms = 0;
    e.seen.clear();
  }
  if (reset) {
    // A fresh poll target: the old one's tokens, ETags and acknowledgements belong to the old
    // lifetime (or machine).
    if (e.polled) {
      poller_->Remove(w.instance_id);
      e.polled = false;
    }
  }
  w.job_id = instance.job_id;
  if (instance.cloud != Cloud::kUnspecified) w.cloud = instance.cloud;
  if (!instance.instance_type.empty()) w.instance_type = instance.instance_type;
  w.metadata_endpoint = instance.metadata_endpoint;
  if (reset) {
    StoreResultLocked(store_->ResetInstance(e.stored));
  } else {
    PersistLocked(e);
  }
  ReconcilePollingLocked(e);
  return absl::OkStatus();
}

absl::Status Detector::Unregister(const std::string& instance_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(instance_id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("instance_id = \"", instance_id, "\": not registered"));
  }
  if (it->second.polled) poller_->Remove(instance_id);
  const WatchedInstance& w = it->second.stored.instance;
  if (w.state != InstanceState::kNotice && w.state != InstanceState::kRevoked) {
    const bool lost = w.state == InstanceState::kLost;
    EndLifetimeLocked(it->second, lost ? w.last_heartbeat_unix_ms : NowUnixMs(), false,
                      lost ? "lost" : "unregistered");
  }
  StoreResultLocked(store_->DeleteInstance(instance_id));
  entries_.erase(it);
  return absl::OkStatus();
}

Detector::Entry& Detector::EnsureLocked(const std::string& instance_id, const std::string& job_id,
                                        Cloud cloud) {
  auto [it, inserted] = entries_.try_emplace(instance_id);
  if (inserted) {
    WatchedInstance& w = it->second.stored.instance;
    w.instance_id = instance_id;
    w.job_id = job_id;
    w.cloud = cloud;
    w.state = InstanceState::kUnknown;
    w.last_heartbeat_unix_ms = NowUnixMs();
    w.registered_unix_ms = w.last_heartbeat_unix_ms;
    PersistLocked(it->second);
  }
  return it->second;
}

void Detector::EndLifetimeLocked(const Entry& e, int64_t ended_unix_ms, bool revoked,
                                 const std::string& how) {
  const WatchedInstance& w = e.stored.instance;
  if (w.registered_unix_ms <= 0) return;  // registered before start times were kept
  StoreResultLocked(
      store_->AddLifetime({.instance_id = w.instance_id,
                           .job_id = w.job_id,
                           .instance_type = w.instance_type,
                           .started_unix_ms = w.registered_unix_ms,
                           .ended_unix_ms = std::max(ended_unix_ms, w.registered_unix_ms),
                           .revoked = revoked,
                           .how = how}));
}

absl::StatusOr<std::vector<Lifetime>> Detector::Lifetimes(const std::string& instance_type) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto closed = store_->LoadLifetimes(instance_type, 100000);
  if (!closed.ok()) return closed.status();
  std::vector<Lifetime> out = *std::move(closed);
  const int64_t now = NowUnixMs();
  for (const auto& [id, e] : entries_) {
    const WatchedInstance& w = e.stored.instance;
    if (w.registered_unix_ms <= 0 || w.state == InstanceState::kNotice ||
        w.state == InstanceState::kRevoked) {
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

void Detector::PersistLocked(const Entry& e) { StoreResultLocked(store_->PutInstance(e.stored)); }

void Detector::StoreResultLocked(const absl::Status& status) {
  if (status.ok()) return;
  ++store_errors_;
  last_store_error_ = std::string(status.message());
}

uint64_t Detector::store_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_errors_;
}

std::string Detector::last_store_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_store_error_;
}

void Detector::AppendLocked(Entry& e, EventKind kind, const std::string& action,
                            int64_t notice_unix_ms, int64_t effective_unix_ms,
                            const std::string& detail, const std::string& seen_key) {
  Event event;
  event.sequence = next_sequence_++;
  event.instance_id = e.stored.instance.instance_id;
  event.job_id = e.stored.instance.job_id;
  event.cloud = e.stored.instance.cloud;
  event.kind = kind;
  event.action = action;
  event.notice_unix_ms = notice_unix_ms;
  event.effective_unix_ms = effective_unix_ms;
  event.detail = detail;
  if (!seen_key.empty()) e.seen.insert(seen_key);
  // Persisted before any subscriber can see it: a restart cannot lose a delivered event.
  StoreResultLocked(store_->AppendEvent(event, e.stored, seen_key));
  events_.push_back(std::move(event));
  if (events_.size() > options_.event_retention) {
    events_.pop_front();
    first_retained_ = events_.front().sequence;
    if (first_retained_ % 1024 == 0) StoreResultLocked(store_->TrimEvents(first_retained_));
  }
  event_cv_.notify_all();
}

void Detector::NoticeLocked(Entry& e, const Notice& n, int64_t seen_unix_ms) {
  if (n.key.empty() || e.seen.count(n.key)) return;  // reported once
  WatchedInstance& w = e.stored.instance;
  if (n.kind == EventKind::kNotice && w.state != InstanceState::kRevoked &&
      w.state != InstanceState::kNotice) {
    // The lifetime ends with this revocation: when the cloud takes it back, else now.
    EndLifetimeLocked(e, n.effective_unix_ms > 0 ? n.effective_unix_ms : seen_unix_ms, true,
                      "notice");
  }
  if (n.kind == EventKind::kNotice && w.state != InstanceState::kRevoked) {
    w.state = InstanceState::kNotice;
    w.reason = n.detail;
    e.stored.notice_effective_unix_ms = n.effective_unix_ms;
  }
  AppendLocked(e, n.kind, n.action, seen_unix_ms, n.effective_unix_ms, n.detail, n.key);
  Metrics()
      .notices.WithLabels({std::string(CloudName(w.cloud)), std::string(EventKindName(n.kind))})
      .Increment();
  Metrics().notice_latency.Observe(std::max<int64_t>(0, NowUnixMs() - seen_unix_ms) / 1000.0);
}

void Detector::HeartbeatLocked(Entry& e, int64_t unix_ms, const std::string& problem) {
  WatchedInstance& w = e.stored.instance;
  w.last_heartbeat_unix_ms = std::max(w.last_heartbeat_unix_ms, unix_ms);
  const InstanceState next = problem.empty() ? InstanceState::kHealthy : InstanceState::kUnknown;
  if (w.state == InstanceState::kLost) {
    w.state = next;
    w.reason = problem;
    AppendLocked(e, EventKind::kRecovered, "", unix_ms, 0, "heartbeats resumed", "");
  } else if ((w.state == InstanceState::kUnknown || w.state == InstanceState::kHealthy) &&
             (w.state != next || w.reason != problem)) {
    w.state = next;
    w.reason = problem;
    PersistLocked(e);
  }
}

absl::Status Detector::Heartbeat(const std::string& instance_id, const std::string& job_id,
                                 Cloud cloud, int64_t unix_ms, const std::string& problem) {
  if (instance_id.empty()) {
    return absl::InvalidArgumentError("instance_id = \"\": must not be empty");
  }
  if (auto s = CheckLengths({{"instance_id", &instance_id, limits::kMaxNameBytes},
                             {"job_id", &job_id, limits::kMaxNameBytes},
                             {"problem", &problem, limits::kMaxTextBytes}});
      !s.ok()) {
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = EnsureLocked(instance_id, job_id, cloud);
  e.agent = true;
  // The detector's clock decides deadlines: an agent's clock may be off.
  (void)unix_ms;
  HeartbeatLocked(e, NowUnixMs(), problem);
  return absl::OkStatus();
}

absl::Status Detector::ReportNotice(const std::string& instance_id, const std::string& job_id,
                                    Cloud cloud, const Notice& notice, int64_t seen_unix_ms) {
  if (instance_id.empty()) {
    return absl::InvalidArgumentError("instance_id = \"\": must not be empty");
  }
  if (notice.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("event key of instance \"", instance_id, "\" = \"\": must not be empty"));
  }
  if (auto s = CheckLengths({{"instance_id", &instance_id, limits::kMaxNameBytes},
                             {"job_id", &job_id, limits::kMaxNameBytes},
                             {"notice_key", &notice.key, limits::kMaxNameBytes},
                             {"event.action", &notice.action, limits::kMaxNameBytes},
                             {"event.detail", &notice.detail, limits::kMaxTextBytes}});
      !s.ok()) {
    return s;
  }
  if (notice.kind != EventKind::kNotice && notice.kind != EventKind::kRebalance &&
      notice.kind != EventKind::kMaintenance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "event kind of instance \"", instance_id, "\" = ", std::string(EventKindName(notice.kind)),
        ": agents report notice, rebalance or maintenance"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = EnsureLocked(instance_id, job_id, cloud);
  e.agent = true;
  HeartbeatLocked(e, NowUnixMs());
  NoticeLocked(e, notice, seen_unix_ms > 0 ? seen_unix_ms : NowUnixMs());
  return absl::OkStatus();
}

void Detector::HandlePollResult(const PollResult& r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(r.instance_id);
  if (it == entries_.end() || !it->second.polled) return;  // unregistered or moved meanwhile
  Entry& e = it->second;
  Metrics()
      .polls
      .WithLabels(
          {std::string(CloudName(e.stored.instance.cloud)), r.healthy ? "healthy" : "unhealthy"})
      .Increment();
  for (Notice n : r.notices) {
    // What a metadata service says is bounded like what agents send.
    n.key = limits::BoundedKey(n.key);
    n.action = limits::ValidUtf8(n.action, limits::kMaxNameBytes);
    n.detail = limits::ValidUtf8(n.detail, limits::kMaxTextBytes);
    NoticeLocked(e, n, r.observed_unix_ms);
  }
  WatchedInstance& w = e.stored.instance;
  if (r.healthy) {
    w.last_heartbeat_unix_ms = r.observed_unix_ms;
    if (w.state == InstanceState::kUnknown) {
      w.state = InstanceState::kHealthy;
      w.reason.clear();
      PersistLocked(e);
    }
  } else if ((w.state == InstanceState::kHealthy || w.state == InstanceState::kUnknown) &&
             w.reason != r.reason) {
    // A failed poll says nothing about revocation: unknown, with why.
    w.state = InstanceState::kUnknown;
    w.reason = r.reason;
    PersistLocked(e);
  }
}

void Detector::CheckDeadlines(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t lost_after_ms =
      absl::ToInt64Milliseconds(options_.heartbeat_interval) * options_.lost_after_intervals;
  for (auto& [id, e] : entries_) {
    WatchedInstance& w = e.stored.instance;
    if (w.state == InstanceState::kNotice && e.stored.notice_effective_unix_ms > 0 &&
        now >= e.stored.notice_effective_unix_ms) {
      w.state = InstanceState::kRevoked;
      w.reason = "the notice's deadline passed";
      AppendLocked(e, EventKind::kRevoked, "", now, e.stored.notice_effective_unix_ms,
                   "notice deadline passed", "");
      ReconcilePollingLocked(e);
      continue;
    }
    // Heartbeat deadlines apply to agent-fed instances: those whose agents report here, or, on a
    // single replica, every instance without a metadata endpoint.
    const bool agent_fed = e.agent || (ring_.replicas().size() <= 1 && w.metadata_endpoint.empty());
    if (!agent_fed || w.state == InstanceState::kLost || w.state == InstanceState::kRevoked) {
      continue;
    }
    if (now - w.last_heartbeat_unix_ms > lost_after_ms) {
      const int64_t silent = now - w.last_heartbeat_unix_ms;
      w.state = InstanceState::kLost;
      w.reason = absl::StrCat("no heartbeat for ", silent, " ms (lost after ",
                              options_.lost_after_intervals, " intervals of ",
                              absl::FormatDuration(options_.heartbeat_interval), ")");
      AppendLocked(e, EventKind::kLost, "", now, 0, w.reason, "");
    }
  }
}

void Detector::MonitorLoop() {
  const auto tick = std::chrono::milliseconds(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval) / 10, 10, 250));
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_cv_.wait_for(lock, tick, [this] { return shutdown_; })) return;
    }
    CheckDeadlines(NowUnixMs());
  }
}

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

absl::StatusOr<std::vector<Event>> Detector::EventsAfter(uint64_t after, const std::string& job_id,
                                                         size_t max, uint64_t* scanned) const {
  std::lock_guard<std::mutex> lock(mu_);
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

void Detector::SetLiveReplicas(const std::vector<std::string>& replicas) {
  std::lock_guard<std::mutex> lock(mu_);
  HashRing ring(replicas);
  if (ring.replicas() == ring_.replicas()) return;
  ring_ = std::move(ring);
  for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
}

std::string Detector::OwnerOf(const std::string& instance_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.empty() ? options_.replica_id : ring_.Owner(instance_id);
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

}  // namespace spotdnn::detector
