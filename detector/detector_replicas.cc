// The detector's replicas on a shared (PostgreSQL) store: the consistent-hash ring of live
// replicas, the lease (join, renew, fence), and the background loop that reads the registry and
// the event log back, writes heartbeats in batches and retries pending notices. The state machine
// and the event log are in detector.cc.
#include <algorithm>
#include <iterator>
#include <set>

#include "absl/strings/str_join.h"
#include "detector/detector.h"
#include "spdlog/spdlog.h"

namespace spotdnn::detector {

namespace {

std::shared_ptr<spdlog::logger> Log() {
  auto logger = spdlog::get("spotdnn-detector");
  return logger ? logger : spdlog::default_logger();
}

}  // namespace

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
  const bool ended_there = r.state == InstanceState::kNotice ||
                           r.state == InstanceState::kRevoked || r.state == InstanceState::kExited;
  const bool ended_here = w.state == InstanceState::kNotice || w.state == InstanceState::kRevoked ||
                          w.state == InstanceState::kExited;
  if (!HoldsLocked(w.instance_id) || (ended_there && !ended_here) ||
      (r.state == InstanceState::kRevoked && w.state == InstanceState::kNotice)) {
    // Another replica's view (its owner's, or a notice an agent reported elsewhere).
    w.state = r.state;
    w.reason = r.reason;
    e.stored.notice_effective_unix_ms = row.notice_effective_unix_ms;
  }
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
  observer_.OnLeaseChange(false);
  Log()->warn("replica {}: lease of epoch {} lost ({}); polling nothing until it joins again",
              options_.replica_id, epoch_.load(), why);
  for (auto& [id, e] : entries_) ReconcilePollingLocked(e);
}

void Detector::LeaseLoop() {
  const int64_t lease_ms = absl::ToInt64Milliseconds(options_.lease);
  const absl::Duration tick = absl::Milliseconds(std::max<int64_t>(10, lease_ms / 20));
  // Renewed every sixth of the lease: a renewal delayed by up to half a lease (a starved thread
  // on a busy host, a slow database round) still lands before the fence at two thirds.
  int64_t next_renew = clock_.SteadyMs() + lease_ms / 6, next_live = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(lease_mu_);
      if (clock_.WaitFor(lock, lease_cv_, tick, [this] { return lease_stop_; })) return;
    }
    const int64_t now = clock_.SteadyMs();
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
  }
}

void Detector::SharedLoop() {
  const int64_t sync_ms = absl::ToInt64Milliseconds(options_.sync_interval);
  const absl::Duration tail =
      absl::Milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.tail_interval)));
  int64_t next_sync = 0;
  uint64_t rounds = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      clock_.WaitFor(lock, stop_cv_, tail, [this] { return shutdown_ || wake_tail_; });
      if (shutdown_) return;
      wake_tail_ = false;
    }
    TailEvents();
    const int64_t now = clock_.SteadyMs();
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
  const int64_t sent = clock_.SteadyMs();
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
  const int64_t sent = clock_.SteadyMs();
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
  const bool fresh = clock_.SteadyMs() - renewed_at_ms_.load() <=
                     absl::ToInt64Milliseconds(options_.lease) * 2 / 3;
  // Stop holding anything before the lease can expire unrenewed (the database slow or
  // unreachable, this process paused): another replica may own the instances then.
  if (!fenced_ && held != epoch_) FenceLocked("another replica took it, or it expired");
  if (!fenced_ && !fresh) FenceLocked("its lease was not renewed for 2/3 of its length");
  if (fenced_ && held != 0 && held != epoch_ && fresh) {
    epoch_ = held;
    fenced_ = false;
    ++lease_changes_;
    observer_.OnLeaseChange(true);
    Log()->info("replica {}: joined with lease epoch {}", options_.replica_id, held);
    // The notice keys it knows stay: each was recorded in the shared log for the lifetime it
    // belongs to (a lifetime that ended meanwhile is forgotten when the registry is read back),
    // and a lease loss un-records nothing. Forgetting them made every recorded notice a write
    // again after each loss, one per notice it held: on a starved host, losing the lease every
    // few seconds, those writes queued for the store's writer lock ahead of the new notices.
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
  const int64_t read_at = clock_.NowUnixMs();
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
  const int64_t now = clock_.NowUnixMs();
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
  std::vector<RecordedKey> keys;
  absl::StatusOr<std::vector<Event>> events = shared_store_->EventsAfter(cursor, kBatch, &keys);
  std::lock_guard<std::mutex> lock(mu_);
  if (!events.ok()) {
    store_ok_ = false;
    StoreResultLocked(events.status());
    return;
  }
  if (events->empty()) return;
  LearnKeysLocked(keys);
  for (Event& e : *events) {
    if (e.sequence <= tail_cursor_) continue;
    tail_cursor_ = e.sequence;
    next_sequence_ = e.sequence + 1;
    (void)KeepLocked(std::move(e));
  }
  if (events->size() == kBatch) wake_tail_ = true;  // more to read
  event_cv_.notify_all();
}

void Detector::LearnKeysLocked(const std::vector<RecordedKey>& keys) {
  // Whichever replica recorded them: one that takes the instance over later (its owner lapsed,
  // the ring moved) then does not write each of its recorded notices again, a write waiting for
  // the store's writer lock, at a time when the replicas are short of it already.
  for (const RecordedKey& k : keys) {
    auto it = entries_.find(k.instance_id);
    if (it != entries_.end() && it->second.stored.instance.registered_unix_ms == k.lifetime_ms) {
      it->second.seen.insert(k.key);
    }
  }
}

void Detector::RetryPending() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fenced_) return;  // kept until this replica holds a lease again
  std::vector<PendingNotice> pending;
  pending.swap(pending_notices_);
  bool failed = false;
  for (PendingNotice& p : pending) {
    auto it = entries_.find(p.instance_id);
    // Gone, or a new lifetime: the notice was the old lifetime's.
    if (it == entries_.end() || it->second.stored.instance.registered_unix_ms != p.lifetime_ms) {
      continue;
    }
    // Recorded here whichever replica polls the instance now (once: the store keeps a notice
    // once per lifetime and key). Left to the new owner, a notice this replica had read waited
    // for that owner's next poll, on a starved host for as long as the owner could not poll, and
    // was lost if the metadata service did not say it again.
    if (failed || !NoticeLocked(it->second, p.notice, p.seen_unix_ms).ok()) {
      pending_notices_.push_back(std::move(p));
      // The lease is gone or the database away: the others would fail too, each a write waiting
      // for the store's writer lock. They are tried at the next round.
      failed = true;
    }
  }
}

}  // namespace spotdnn::detector
