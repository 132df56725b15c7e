#include "detector/detector.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/limits.h"
#include "services/common/metrics.h"
#include "spdlog/spdlog.h"

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
  metrics::Family<metrics::Counter>& lease_changes = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_lease_changes_total",
      "a shared replica joining (taking a lease) or losing its lease", {"change"});
  metrics::Histogram& notice_latency =
      metrics::DefaultRegistry()
          .Histograms("spotdnn_detector_notice_latency_seconds",
                      "from a notice being read from the metadata service (by this replica's "
                      "poll, or by an agent, on its clock) to its event being recorded",
                      {}, {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10, 30})
          .WithLabels({});
};

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<spdlog::logger> Log() {
  auto logger = spdlog::get("spotdnn-detector");
  return logger ? logger : spdlog::default_logger();
}

// A shared store's refusal, as agents and callers see it: try again (elsewhere).
absl::Status Unavailable(const absl::Status& s) {
  if (s.ok() || absl::IsUnavailable(s) || absl::IsInvalidArgument(s)) return s;
  return absl::UnavailableError(s.message());
}

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
  if (options.boot_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "boot_grace = ", absl::FormatDuration(options.boot_grace), ": must not be negative"));
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
  d->shared_ = d->store_->shared();
  if (d->shared_) {
    if (d->options_.lease < absl::Milliseconds(300)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lease = ", absl::FormatDuration(d->options_.lease), ": must be at least 300ms"));
    }
    auto second = DetectorStore::Open(d->options_.db_path);
    if (!second.ok()) return second.status();
    d->shared_store_ = *std::move(second);
    // The lease has a connection and a thread of its own: a slow read of the event log or the
    // registry (a busy host, a long transaction) must not delay its renewal past the fence.
    auto third = DetectorStore::Open(d->options_.db_path);
    if (!third.ok()) return third.status();
    d->lease_store_ = *std::move(third);
    // A database that is down fails a call in about 0.1 s (not acknowledged; pending notices are
    // tried again by the background loop) instead of holding every request for seconds.
    d->store_->RetryBriefly();
    d->shared_store_->RetryBriefly();
    d->lease_store_->RetryBriefly();
    d->fenced_ = true;  // until the first join is adopted
    if (absl::Status s = d->Join(); !s.ok()) return s;
    if (absl::Status s = d->ReadLiveReplicas(); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(d->mu_);
    d->ApplyLeaseLocked();
  }
  if (d->options_.run_poller) {
    Detector* self = d.get();
    d->poller_ = std::make_unique<MetadataPoller>(
        d->options_.poller, [self](const PollResult& r) { self->HandlePollResult(r); });
    if (auto s = d->poller_->Start(); !s.ok()) return s;
  }
  if (auto s = d->Load(); !s.ok()) return s;
  d->monitor_ = std::thread([self = d.get()] { self->MonitorLoop(); });
  if (d->shared_) {
    d->shared_loop_ = std::thread([self = d.get()] { self->SharedLoop(); });
    d->lease_loop_ = std::thread([self = d.get()] { self->LeaseLoop(); });
  }
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
    // Agents get a full lost-after period to reconnect to a restarted detector (those that never
    // reported keep their boot grace).
    if (e.stored.instance.last_heartbeat_unix_ms > 0) {
      e.stored.instance.last_heartbeat_unix_ms =
          std::max(e.stored.instance.last_heartbeat_unix_ms, now);
    }
  }
  for (auto& [id, key] : *seen) {
    if (auto it = entries_.find(id); it != entries_.end()) it->second.seen.insert(key);
  }
  events_.assign(events->begin(), events->end());
  if (!events_.empty()) {
    next_sequence_ = events_.back().sequence + 1;
    tail_cursor_ = events_.back().sequence;
    // A shared log's numbers have gaps (a sequence value a refused append took): only a full
    // load says that older events were trimmed.
    if (!shared_ || events_.size() >= options_.event_retention) {
      first_retained_ = events_.front().sequence;
    }
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
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lease_stop_ = true;
  }
  lease_cv_.notify_all();
  event_cv_.notify_all();
  stop_cv_.notify_all();
  if (poller_) poller_->Stop();  // not under mu_: the poller's sink takes it
  if (monitor_.joinable()) monitor_.join();
  if (shared_loop_.joinable()) shared_loop_.join();
  if (lease_loop_.joinable()) lease_loop_.join();
  if (lease_store_) {
    // The others take this replica's instances at once instead of when the lease expires.
    const int64_t epoch = held_epoch_.load();
    if (epoch > 0) (void)lease_store_->LeaveLease(options_.replica_id, epoch);
  }
}

void Detector::HoldLockForTesting(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::SleepFor(d);
}

bool Detector::HoldsLocked(const std::string& instance_id) const {
  if (shared_ && fenced_) return false;
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
  unregistered_.erase(instance.instance_id);
  auto [it, inserted] = entries_.try_emplace(instance.instance_id);
  Entry& e = it->second;
  WatchedInstance& w = e.stored.instance;
  if (shared_) {
    // Decide on the registration as the database has it (another replica may have changed it).
    if (inserted) w.instance_id = instance.instance_id;
    absl::StatusOr<bool> found = RefreshLocked(e);
    if (!found.ok()) {
      if (inserted) entries_.erase(it);
      return Unavailable(found.status());
    }
    inserted = !*found;
  }
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
    // None yet: the instance may still be booting (see CheckDeadlines).
    w.last_heartbeat_unix_ms = 0;
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
  const absl::Status stored =
      reset ? store_->ResetInstance(e.stored) : store_->PutInstance(e.stored);
  StoreResultLocked(stored);
  e.written_ms = NowUnixMs();
  ReconcilePollingLocked(e);
  // A shared store is the registry: a registration it did not take is not acknowledged.
  return shared_ ? Unavailable(stored) : absl::OkStatus();
}

absl::StatusOr<bool> Detector::RefreshLocked(Entry& e) {
  auto row = store_->LoadInstance(e.stored.instance.instance_id);
  if (!row.ok()) return row.status();
  if (!row->has_value()) {
    // Not registered (any more): a fresh entry.
    const std::string id = e.stored.instance.instance_id;
    if (e.polled) {
      poller_->Remove(id);
      e.polled = false;
    }
    e.stored = StoredInstance();
    e.stored.instance.instance_id = id;
    e.seen.clear();
    return false;
  }
  MergeLocked(e, **row);
  return true;
}

void Detector::MergeLocked(Entry& e, const StoredInstance& row) {
  WatchedInstance& w = e.stored.instance;
  const WatchedInstance& r = row.instance;
  if (r.registered_unix_ms != w.registered_unix_ms || r.metadata_endpoint != w.metadata_endpoint ||
      r.cloud != w.cloud) {
    // A new lifetime (or machine) registered through another replica.
    if (e.polled) {
      poller_->Remove(w.instance_id);
      e.polled = false;
    }
    if (r.registered_unix_ms != w.registered_unix_ms) e.seen.clear();
    e.stored = row;
    return;
  }
  w.job_id = r.job_id;
  w.instance_type = r.instance_type;
  w.last_heartbeat_unix_ms = std::max(w.last_heartbeat_unix_ms, r.last_heartbeat_unix_ms);
  const bool ended_there = r.state == InstanceState::kNotice || r.state == InstanceState::kRevoked;
  const bool ended_here = w.state == InstanceState::kNotice || w.state == InstanceState::kRevoked;
  if (!HoldsLocked(w.instance_id) || (ended_there && !ended_here) ||
      (r.state == InstanceState::kRevoked && w.state == InstanceState::kNotice)) {
    // Another replica's view (its owner's, or a notice an agent reported elsewhere).
    w.state = r.state;
    w.reason = r.reason;
    e.stored.notice_effective_unix_ms = row.notice_effective_unix_ms;
  }
}

absl::Status Detector::Unregister(const std::string& instance_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(instance_id);
  if (it == entries_.end() && shared_) {
    // Registered through another replica and not read back here yet?
    Entry fresh;
    fresh.stored.instance.instance_id = instance_id;
    absl::StatusOr<bool> found = RefreshLocked(fresh);
    if (!found.ok()) return Unavailable(found.status());
    if (*found) it = entries_.emplace(instance_id, std::move(fresh)).first;
  }
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
  const absl::Status deleted = store_->DeleteInstance(instance_id);
  StoreResultLocked(deleted);
  entries_.erase(it);
  pending_heartbeats_.erase(instance_id);
  if (shared_) unregistered_[instance_id] = NowUnixMs();
  return shared_ ? Unavailable(deleted) : absl::OkStatus();
}

Detector::Entry& Detector::EnsureLocked(const std::string& instance_id, const std::string& job_id,
                                        Cloud cloud) {
  auto [it, inserted] = entries_.try_emplace(instance_id);
  if (inserted && shared_) {
    // Registered through another replica and not read back here yet?
    it->second.stored.instance.instance_id = instance_id;
    absl::StatusOr<bool> found = RefreshLocked(it->second);
    if (found.ok() && *found) return it->second;
  }
  if (inserted) {
    WatchedInstance& w = it->second.stored.instance;
    w.instance_id = instance_id;
    w.job_id = job_id;
    w.cloud = cloud;
    w.state = InstanceState::kUnknown;
    w.last_heartbeat_unix_ms = NowUnixMs();
    w.registered_unix_ms = w.last_heartbeat_unix_ms;
    StoreResultLocked(store_->PutInstance(it->second.stored));
    it->second.written_ms = w.registered_unix_ms;
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

void Detector::PersistLocked(const Entry& e) {
  // Shared: only the state, and only while the registration is the same lifetime (one deleted or
  // registered again through another replica meanwhile is left alone).
  StoreResultLocked(shared_ ? store_->UpdateInstanceState(e.stored)
                            : store_->PutInstance(e.stored));
}

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

absl::StatusOr<bool> Detector::AppendLocked(Entry& e, EventKind kind, const std::string& action,
                                            int64_t notice_unix_ms, int64_t effective_unix_ms,
                                            const std::string& detail,
                                            const std::string& seen_key) {
  Event event;
  event.sequence = shared_ ? 0 : next_sequence_++;
  event.instance_id = e.stored.instance.instance_id;
  event.job_id = e.stored.instance.job_id;
  event.cloud = e.stored.instance.cloud;
  event.kind = kind;
  event.action = action;
  event.notice_unix_ms = notice_unix_ms;
  event.effective_unix_ms = effective_unix_ms;
  event.detail = detail;
  if (shared_) {
    // The database numbers it and keeps it once; every replica reads it back (TailEvents).
    std::string dedupe = seen_key;
    if (kind == EventKind::kRevoked) dedupe = "revoked";
    if (kind == EventKind::kLost)
      dedupe = absl::StrCat("lost@", e.stored.instance.last_heartbeat_unix_ms);
    auto appended = store_->AppendSharedEvent(event, e.stored.instance.registered_unix_ms, dedupe,
                                              e.stored, options_.replica_id, epoch_);
    StoreResultLocked(appended.status());
    if (!appended.ok()) return appended.status();
    if (!seen_key.empty()) e.seen.insert(seen_key);
    wake_tail_ = true;
    stop_cv_.notify_all();
    return *appended;
  }
  if (!seen_key.empty()) e.seen.insert(seen_key);
  // Persisted before any subscriber can see it: a restart cannot lose a delivered event.
  StoreResultLocked(store_->AppendEvent(event, e.stored, seen_key));
  // A single replica trims its database now and then; shared ones in SharedLoop.
  if (KeepLocked(std::move(event)) && first_retained_ % 1024 == 0) {
    StoreResultLocked(store_->TrimEvents(first_retained_));
  }
  event_cv_.notify_all();
  return true;
}

bool Detector::KeepLocked(Event event) {
  events_.push_back(std::move(event));
  if (events_.size() <= options_.event_retention) return false;
  events_.pop_front();
  first_retained_ = events_.front().sequence;
  return true;
}

absl::Status Detector::NoticeLocked(Entry& e, const Notice& n, int64_t seen_unix_ms) {
  if (n.key.empty() || e.seen.count(n.key)) return absl::OkStatus();  // reported once
  WatchedInstance& w = e.stored.instance;
  const bool ends_lifetime = n.kind == EventKind::kNotice && w.state != InstanceState::kRevoked &&
                             w.state != InstanceState::kNotice;
  const StoredInstance before = e.stored;
  if (n.kind == EventKind::kNotice && w.state != InstanceState::kRevoked) {
    w.state = InstanceState::kNotice;
    w.reason = n.detail;
    e.stored.notice_effective_unix_ms = n.effective_unix_ms;
  }
  absl::StatusOr<bool> recorded =
      AppendLocked(e, n.kind, n.action, seen_unix_ms, n.effective_unix_ms, n.detail, n.key);
  if (!recorded.ok()) {
    e.stored = before;  // tried again (a poll's notice) or refused (an agent's)
    return recorded.status();
  }
  if (!*recorded) return absl::OkStatus();  // another replica recorded it
  if (ends_lifetime) {
    // The lifetime ends with this revocation: when the cloud takes it back, else now.
    EndLifetimeLocked(e, n.effective_unix_ms > 0 ? n.effective_unix_ms : seen_unix_ms, true,
                      "notice");
  }
  Metrics()
      .notices.WithLabels({std::string(CloudName(w.cloud)), std::string(EventKindName(n.kind))})
      .Increment();
  Metrics().notice_latency.Observe(std::max<int64_t>(0, NowUnixMs() - seen_unix_ms) / 1000.0);
  return absl::OkStatus();
}

void Detector::HeartbeatLocked(Entry& e, int64_t unix_ms, const std::string& problem) {
  WatchedInstance& w = e.stored.instance;
  w.last_heartbeat_unix_ms = std::max(w.last_heartbeat_unix_ms, unix_ms);
  const InstanceState next = problem.empty() ? InstanceState::kHealthy : InstanceState::kUnknown;
  if (w.state == InstanceState::kLost) {
    w.state = next;
    w.reason = problem;
    (void)AppendLocked(e, EventKind::kRecovered, "", unix_ms, 0, "heartbeats resumed", "");
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
  if (shared_) {
    // Written in batches; the instance's owner applies the deadline.
    int64_t& pending = pending_heartbeats_[instance_id];
    pending = std::max(pending, e.stored.instance.last_heartbeat_unix_ms);
  }
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
  // Not acknowledged unless recorded: the agent sends it again, here or to another replica.
  return Unavailable(NoticeLocked(e, notice, seen_unix_ms > 0 ? seen_unix_ms : NowUnixMs()));
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
    if (!NoticeLocked(e, n, r.observed_unix_ms).ok() && shared_) {
      // The metadata service may not say it again (a GCE long poll answers changes only).
      bool queued = false;
      for (const PendingNotice& p : pending_notices_) {
        queued |= p.instance_id == r.instance_id && p.notice.key == n.key;
      }
      if (!queued) {
        pending_notices_.push_back(
            {r.instance_id, e.stored.instance.registered_unix_ms, n, r.observed_unix_ms});
      }
    }
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
    // Shared: the instance's owner applies its deadlines (each is recorded once all the same).
    if (shared_ && !HoldsLocked(id)) continue;
    if (w.state == InstanceState::kNotice && e.stored.notice_effective_unix_ms > 0 &&
        now >= e.stored.notice_effective_unix_ms) {
      const StoredInstance before = e.stored;
      w.state = InstanceState::kRevoked;
      w.reason = "the notice's deadline passed";
      if (!AppendLocked(e, EventKind::kRevoked, "", now, e.stored.notice_effective_unix_ms,
                        "notice deadline passed", "")
               .ok()) {
        e.stored = before;  // tried again at the next check
        continue;
      }
      ReconcilePollingLocked(e);
      continue;
    }
    // Heartbeat deadlines apply to agent-fed instances: those whose agents report here, or, on a
    // single replica (or to a shared replica's owner, whatever replica the agent reports to),
    // every instance without a metadata endpoint.
    const bool agent_fed =
        e.agent || ((shared_ || ring_.replicas().size() <= 1) && w.metadata_endpoint.empty());
    if (!agent_fed || w.state == InstanceState::kLost || w.state == InstanceState::kRevoked) {
      continue;
    }
    // Registered at launch, a VM boots for seconds (a loaded host) to minutes (a cloud) before
    // its agent reports: lost_after_intervals counts from the first heartbeat, boot_grace before.
    const bool heard = w.last_heartbeat_unix_ms > 0;
    const int64_t silent = now - (heard ? w.last_heartbeat_unix_ms : w.registered_unix_ms);
    if (silent > (heard ? lost_after_ms : absl::ToInt64Milliseconds(options_.boot_grace))) {
      const StoredInstance before = e.stored;
      w.state = InstanceState::kLost;
      w.reason = heard ? absl::StrCat("no heartbeat for ", silent, " ms (lost after ",
                                      options_.lost_after_intervals, " intervals of ",
                                      absl::FormatDuration(options_.heartbeat_interval), ")")
                       : absl::StrCat("no heartbeat in the ", silent,
                                      " ms since its registration (boot grace ",
                                      absl::FormatDuration(options_.boot_grace), ")");
      if (!AppendLocked(e, EventKind::kLost, "", now, 0, w.reason, "").ok()) e.stored = before;
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
      if (shared_) ApplyLeaseLocked();
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

void Detector::SetLiveReplicas(const std::vector<std::string>& replicas) {
  std::lock_guard<std::mutex> lock(mu_);
  SetLiveReplicasLocked(replicas);
}

bool Detector::SetLiveReplicasLocked(std::vector<std::string> replicas) {
  // The ring (virtual nodes hashed) is built only when the set changed.
  std::sort(replicas.begin(), replicas.end());
  replicas.erase(std::unique(replicas.begin(), replicas.end()), replicas.end());
  if (replicas == ring_.replicas()) return false;
  ring_ = HashRing(replicas);
  for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
  return true;
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

std::vector<std::string> Detector::LiveReplicas() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.replicas();
}

bool Detector::serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !shared_ || (!fenced_ && store_ok_ && !shutdown_);
}

uint64_t Detector::lease_changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lease_changes_;
}

void Detector::FenceLocked(const std::string& why) {
  if (fenced_) return;
  fenced_ = true;
  ++lease_changes_;
  Metrics().lease_changes.WithLabels({"lost"}).Increment();
  Log()->warn("replica {}: lease of epoch {} lost ({}); polling nothing until it joins again",
              options_.replica_id, epoch_.load(), why);
  for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
}

void Detector::LeaseLoop() {
  const int64_t lease_ms = absl::ToInt64Milliseconds(options_.lease);
  const auto tick = std::chrono::milliseconds(std::max<int64_t>(10, lease_ms / 20));
  // Renewed every sixth of the lease: a renewal delayed by up to half a lease (a starved thread
  // on a busy host, a slow database round) still lands before the fence at two thirds.
  int64_t next_renew = SteadyMs() + lease_ms / 6, next_live = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(lease_mu_);
      if (lease_cv_.wait_for(lock, tick, [this] { return lease_stop_; })) return;
    }
    const int64_t now = SteadyMs();
    const int64_t held = held_epoch_.load();
    const bool lost = held == 0 || (fenced_.load() && held == epoch_.load());
    if (now >= next_renew || lost) {
      RenewLease();  // lost: joins again, every tick until it can
      next_renew = now + lease_ms / 6;
      next_live = 0;
    }
    if (now >= next_live) {
      (void)ReadLiveReplicas();  // failed: counted; the monitor fences if it lasts
      next_live = now + std::max<int64_t>(50, lease_ms / 10);
    }
    stop_cv_.notify_all();  // the monitor applies what changed at once
  }
}

void Detector::SharedLoop() {
  const int64_t sync_ms = absl::ToInt64Milliseconds(options_.sync_interval);
  const auto tail = std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.tail_interval)));
  int64_t next_sync = 0;
  uint64_t rounds = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      stop_cv_.wait_for(lock, tail, [this] { return shutdown_ || wake_tail_; });
      if (shutdown_) return;
      wake_tail_ = false;
    }
    TailEvents();
    const int64_t now = SteadyMs();
    if (now >= next_sync) {
      SyncRegistry();
      RetryPending();
      next_sync = now + sync_ms;
      if (++rounds % 1000 == 0) {
        // Each replica trims to the same bound: the newest event_retention sequence numbers.
        uint64_t first_kept;
        {
          std::lock_guard<std::mutex> lock(mu_);
          first_kept = tail_cursor_ > options_.event_retention
                           ? tail_cursor_ - options_.event_retention + 1
                           : 0;
        }
        if (first_kept > 0) (void)shared_store_->TrimEvents(first_kept);
      }
    }
  }
}

void Detector::RenewLease() {
  const int64_t lease_ms = absl::ToInt64Milliseconds(options_.lease);
  const int64_t epoch = held_epoch_.load();
  const int64_t sent = SteadyMs();
  // A fence concerns the epoch this replica recorded under; a newer one not adopted yet is kept.
  if (epoch != 0 && !(fenced_.load() && epoch == epoch_.load())) {
    absl::StatusOr<bool> renewed = lease_store_->RenewLease(options_.replica_id, epoch, lease_ms);
    NoteLeaseAnswer(renewed.status());
    if (!renewed.ok()) return;  // the monitor fences if it stays so
    if (*renewed) {
      renewed_at_ms_ = sent;
      return;
    }
    held_epoch_ = 0;  // another replica took it, or it expired: the monitor fences
  }
  // Join again with a new epoch: whatever this replica wrote under the old one is fenced off.
  (void)Join();  // failed: tried again at the next round
}

absl::Status Detector::Join() {
  const int64_t sent = SteadyMs();
  absl::StatusOr<int64_t> joined =
      lease_store_->JoinLease(options_.replica_id, absl::ToInt64Milliseconds(options_.lease));
  NoteLeaseAnswer(joined.status());
  if (!joined.ok()) return joined.status();
  renewed_at_ms_ = sent;  // before the epoch: whoever sees the new epoch sees it renewed
  held_epoch_ = *joined;
  return absl::OkStatus();
}

absl::Status Detector::ReadLiveReplicas() {
  absl::StatusOr<std::vector<Lease>> leases = lease_store_->LiveLeases();
  NoteLeaseAnswer(leases.status());
  if (!leases.ok()) return leases.status();
  std::vector<std::string> live;
  for (const Lease& l : *leases) live.push_back(l.replica_id);
  std::lock_guard<std::mutex> lock(lease_mu_);
  lease_news_.live = std::move(live);
  return absl::OkStatus();
}

void Detector::NoteLeaseAnswer(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  lease_news_.ok = status.ok();
  if (!status.ok()) {
    ++lease_news_.errors;
    lease_news_.last_error = status;
  }
}

void Detector::ApplyLeaseLocked() {
  LeaseNews news;
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    std::swap(news, lease_news_);
  }
  if (news.ok.has_value()) store_ok_ = *news.ok;
  if (news.errors > 0) {
    store_errors_ += news.errors - 1;
    StoreResultLocked(news.last_error);
  }
  const int64_t held = held_epoch_.load();
  const bool fresh = SteadyMs() - renewed_at_ms_.load() <=
                     absl::ToInt64Milliseconds(options_.lease) * 2 / 3;
  // Stop holding anything before the lease can expire unrenewed (the database slow or
  // unreachable, this process paused): another replica may own the instances then.
  if (!fenced_ && held != epoch_) FenceLocked("another replica took it, or it expired");
  if (!fenced_ && !fresh) FenceLocked("its lease was not renewed for 2/3 of its length");
  if (fenced_ && held != 0 && held != epoch_ && fresh) {
    epoch_ = held;
    fenced_ = false;
    ++lease_changes_;
    Metrics().lease_changes.WithLabels({"joined"}).Increment();
    Log()->info("replica {}: joined with lease epoch {}", options_.replica_id, held);
    // After a loss its view of the instances is stale: read them back before polling them.
    for (auto& [id, e] : entries_) e.seen.clear();
    for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
  }
  if (news.live.has_value() && SetLiveReplicasLocked(*std::move(news.live))) {
    Log()->info("replica {}: live replicas now {}", options_.replica_id,
                absl::StrJoin(ring_.replicas(), ","));
  }
}

void Detector::SyncRegistry() {
  // Heartbeats this replica took, for the owners to judge.
  std::vector<std::pair<std::string, int64_t>> beats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    beats.assign(pending_heartbeats_.begin(), pending_heartbeats_.end());
    pending_heartbeats_.clear();
  }
  if (absl::Status s = shared_store_->FlushHeartbeats(beats); !s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, ms] : beats) {
      int64_t& pending = pending_heartbeats_[id];
      pending = std::max(pending, ms);
    }
    store_ok_ = false;
    StoreResultLocked(s);
    return;
  }
  const int64_t read_at = NowUnixMs();
  absl::StatusOr<std::vector<StoredInstance>> rows = shared_store_->LoadInstances();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = unregistered_.begin(); it != unregistered_.end();) {
    it = read_at - it->second > 10000 ? unregistered_.erase(it) : std::next(it);
  }
  if (!rows.ok()) {
    store_ok_ = false;
    StoreResultLocked(rows.status());
    return;
  }
  std::set<std::string> present;
  for (StoredInstance& row : *rows) {
    const std::string id = row.instance.instance_id;
    present.insert(id);
    if (auto gone = unregistered_.find(id);
        gone != unregistered_.end() && gone->second >= read_at) {
      continue;  // unregistered here after this read began
    }
    auto [it, inserted] = entries_.try_emplace(id);
    if (inserted) {
      it->second.stored = std::move(row);
    } else {
      MergeLocked(it->second, row);
    }
    ReconcilePollingLocked(it->second);
  }
  // Unregistered through another replica. One registered here since the read began is kept.
  const int64_t now = NowUnixMs();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (present.count(it->first) || now - it->second.written_ms < 10000) {
      ++it;
      continue;
    }
    if (it->second.polled) poller_->Remove(it->first);
    it = entries_.erase(it);
  }
}

void Detector::TailEvents() {
  uint64_t cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cursor = tail_cursor_;
  }
  constexpr size_t kBatch = 1000;
  absl::StatusOr<std::vector<Event>> events = shared_store_->EventsAfter(cursor, kBatch);
  std::lock_guard<std::mutex> lock(mu_);
  if (!events.ok()) {
    store_ok_ = false;
    StoreResultLocked(events.status());
    return;
  }
  if (events->empty()) return;
  for (Event& e : *events) {
    if (e.sequence <= tail_cursor_) continue;
    tail_cursor_ = e.sequence;
    next_sequence_ = e.sequence + 1;
    (void)KeepLocked(std::move(e));
  }
  if (events->size() == kBatch) wake_tail_ = true;  // more to read
  event_cv_.notify_all();
}

void Detector::RetryPending() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fenced_) return;  // kept until this replica holds a lease again
  std::vector<PendingNotice> pending;
  pending.swap(pending_notices_);
  for (PendingNotice& p : pending) {
    auto it = entries_.find(p.instance_id);
    // Gone, a new lifetime, or another replica's now (it polls the notice itself).
    if (it == entries_.end() || it->second.stored.instance.registered_unix_ms != p.lifetime_ms ||
        !HoldsLocked(p.instance_id)) {
      continue;
    }
    if (!NoticeLocked(it->second, p.notice, p.seen_unix_ms).ok()) {
      pending_notices_.push_back(std::move(p));
    }
  }
}

}  // namespace spotdnn::detector
