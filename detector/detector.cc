#include "detector/detector.h"

#include <algorithm>
#include <initializer_list>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/limits.h"

namespace spotdnn::detector {

namespace {

// A shared store's refusal, as agents and callers see it: try again (elsewhere).
absl::Status Unavailable(const absl::Status& s) {
  if (s.ok() || absl::IsUnavailable(s) || absl::IsInvalidArgument(s)) return s;
  return absl::UnavailableError(s.message());
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

Detector::Detector(DetectorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : base::RealClock::Get()),
      observer_(options_.observer != nullptr ? *options_.observer : DetectorObserver::None()) {
  if (options_.poller.clock == nullptr) options_.poller.clock = &clock_;
}

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
  std::vector<RecordedKey> keys;
  auto events = store_->LoadEvents(options_.event_retention, &keys);
  if (!events.ok()) return events.status();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_.NowUnixMs();
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
  LearnKeysLocked(keys);
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
  clock_.Sleep(d);
}

bool Detector::HoldsLocked(const std::string& instance_id) const {
  if (shared_ && fenced_) return false;
  return ring_.empty() || ring_.Owner(instance_id) == options_.replica_id;
}

void Detector::ReconcilePollingLocked(Entry& e) {
  const bool want = poller_ && !shutdown_ && !e.stored.instance.metadata_endpoint.empty() &&
                    HoldsLocked(e.stored.instance.instance_id) &&
                    e.stored.instance.state != InstanceState::kRevoked &&
                    e.stored.instance.state != InstanceState::kExited;
  if (want && !e.polled) {
    e.polled =
        poller_
            ->Add({e.stored.instance.instance_id, e.stored.instance.cloud,
                   e.stored.instance.metadata_endpoint, e.stored.instance.registered_unix_ms})
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
  const bool ended = was == InstanceState::kRevoked || was == InstanceState::kLost ||
                     was == InstanceState::kExited;
  const bool endpoint_changed = !w.metadata_endpoint.empty() &&
                                !instance.metadata_endpoint.empty() &&
                                w.metadata_endpoint != instance.metadata_endpoint;
  const bool cloud_changed = w.cloud != Cloud::kUnspecified &&
                             instance.cloud != Cloud::kUnspecified && instance.cloud != w.cloud;
  const bool reset = !inserted && (ended || endpoint_changed || cloud_changed);
  if (reset && was != InstanceState::kNotice && was != InstanceState::kRevoked &&
      was != InstanceState::kExited) {
    // A revoked lifetime was recorded at its notice, an exited one at its exit; any other ends
    // here, censored.
    const bool lost = was == InstanceState::kLost;
    EndLifetimeLocked(e, lost ? w.last_heartbeat_unix_ms : clock_.NowUnixMs(), false,
                      lost ? "lost" : "registered again");
  }
  if (inserted || reset) {
    w.registered_unix_ms = clock_.NowUnixMs();
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
  e.written_ms = clock_.NowUnixMs();
  ReconcilePollingLocked(e);
  // A shared store is the registry: a registration it did not take is not acknowledged.
  return shared_ ? Unavailable(stored) : absl::OkStatus();
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
  if (w.state != InstanceState::kNotice && w.state != InstanceState::kRevoked &&
      w.state != InstanceState::kExited) {
    const bool lost = w.state == InstanceState::kLost;
    EndLifetimeLocked(it->second, lost ? w.last_heartbeat_unix_ms : clock_.NowUnixMs(), false,
                      lost ? "lost" : "unregistered");
  }
  const absl::Status deleted = store_->DeleteInstance(instance_id);
  StoreResultLocked(deleted);
  entries_.erase(it);
  pending_heartbeats_.erase(instance_id);
  if (shared_) unregistered_[instance_id] = clock_.NowUnixMs();
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
    w.last_heartbeat_unix_ms = clock_.NowUnixMs();
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
  const bool open = w.state != InstanceState::kRevoked && w.state != InstanceState::kNotice &&
                    w.state != InstanceState::kExited;
  const bool ends_lifetime = (n.kind == EventKind::kNotice || n.kind == EventKind::kExited) && open;
  const StoredInstance before = e.stored;
  if (n.kind == EventKind::kNotice && w.state != InstanceState::kRevoked &&
      w.state != InstanceState::kExited) {
    w.state = InstanceState::kNotice;
    w.reason = n.detail;
    e.stored.notice_effective_unix_ms = n.effective_unix_ms;
  }
  if (n.kind == EventKind::kExited) {
    // Its command is done: no heartbeat is expected any more (its silence is not a loss), and a
    // notice still out is moot.
    w.state = InstanceState::kExited;
    w.reason = n.detail.substr(0, n.detail.find('\n'));
    e.stored.notice_effective_unix_ms = 0;
  }
  absl::StatusOr<bool> recorded =
      AppendLocked(e, n.kind, n.action, seen_unix_ms, n.effective_unix_ms, n.detail, n.key);
  if (!recorded.ok()) {
    e.stored = before;  // tried again (a poll's notice) or refused (an agent's)
    return recorded.status();
  }
  if (!*recorded) return absl::OkStatus();  // another replica recorded it
  if (ends_lifetime && n.kind == EventKind::kExited) {
    EndLifetimeLocked(e, seen_unix_ms, false, "exited");
    ReconcilePollingLocked(e);
  } else if (ends_lifetime) {
    // The lifetime ends with this revocation: when the cloud takes it back, else now.
    EndLifetimeLocked(e, n.effective_unix_ms > 0 ? n.effective_unix_ms : seen_unix_ms, true,
                      "notice");
  }
  observer_.OnNotice(w.cloud, n.kind,
                     absl::Milliseconds(std::max<int64_t>(0, clock_.NowUnixMs() - seen_unix_ms)));
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
  HeartbeatLocked(e, clock_.NowUnixMs(), problem);
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
      notice.kind != EventKind::kMaintenance && notice.kind != EventKind::kExited) {
    return absl::InvalidArgumentError(absl::StrCat(
        "event kind of instance \"", instance_id, "\" = ", std::string(EventKindName(notice.kind)),
        ": agents report notice, rebalance, maintenance or exited"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = EnsureLocked(instance_id, job_id, cloud);
  e.agent = true;
  HeartbeatLocked(e, clock_.NowUnixMs());
  // Not acknowledged unless recorded: the agent sends it again, here or to another replica.
  return Unavailable(NoticeLocked(e, notice, seen_unix_ms > 0 ? seen_unix_ms : clock_.NowUnixMs()));
}

void Detector::HandlePollResult(const PollResult& r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(r.instance_id);
  if (it == entries_.end()) return;  // unregistered meanwhile
  Entry& e = it->second;
  // A poll of an earlier lifetime (or endpoint) of this id answered late: not this one's notice.
  if (r.tag != e.stored.instance.registered_unix_ms) return;
  // A poll that was in flight when this replica stopped polling the instance (its lease lapsed, or
  // the ring gave the instance to another replica) still read the instance's notices: they are
  // recorded like any others (once, whoever else reports them). The state is left to the poller
  // of the instance now.
  const bool ours = e.polled;
  if (ours) observer_.OnPoll(e.stored.instance.cloud, r.healthy);
  for (Notice n : r.notices) {
    // What a metadata service says is bounded like what agents send.
    n.key = limits::BoundedKey(n.key);
    n.action = limits::ValidUtf8(n.action, limits::kMaxNameBytes);
    n.detail = limits::ValidUtf8(n.detail, limits::kMaxTextBytes);
    const bool fenced = shared_ && fenced_;
    // A fenced replica writes nothing (its lease lapsed): the notice waits for its next lease.
    if ((fenced || !NoticeLocked(e, n, r.observed_unix_ms).ok()) && shared_) {
      QueuePendingLocked(e, n, r.observed_unix_ms);
    }
  }
  if (!ours) return;
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

void Detector::QueuePendingLocked(const Entry& e, const Notice& n, int64_t seen_unix_ms) {
  // The metadata service may not say it again (a GCE long poll answers changes only).
  if (n.key.empty() || e.seen.count(n.key)) return;
  const std::string& id = e.stored.instance.instance_id;
  for (const PendingNotice& p : pending_notices_) {
    if (p.instance_id == id && p.notice.key == n.key) return;
  }
  pending_notices_.push_back({id, e.stored.instance.registered_unix_ms, n, seen_unix_ms});
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
    if (!agent_fed || w.state == InstanceState::kLost || w.state == InstanceState::kRevoked ||
        w.state == InstanceState::kExited) {
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
  const absl::Duration tick = absl::Milliseconds(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval) / 10, 10, 250));
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (clock_.WaitFor(lock, stop_cv_, tick, [this] { return shutdown_; })) return;
      if (shared_) ApplyLeaseLocked();
    }
    CheckDeadlines(clock_.NowUnixMs());
  }
}

}  // namespace spotdnn::detector
