// The detector core: the registry of watched instances, their state machine, the event log with
// sequence numbers, persistence, heartbeat deadlines and (with replicas) which instances this
// replica holds. Fed by its own MetadataPoller and by agents' reports.
//
// On a SQLite store it is the one replica: the registry and event log live in this process and
// its file. On a PostgreSQL store it is one of any number of identical replicas sharing that
// database (DetectorStore):
//   - Membership by leases in the database: each replica holds a lease row with an epoch, renewed
//     every lease/6 and judged on the database's clock. The live replicas (unexpired leases) share
//     the instances by consistent hashing of their ids; a dead replica's instances move once its
//     lease expires (within lease + lease/10). A replica that cannot renew in time (paused,
//     partitioned, the database unreachable) stops polling everything before its lease can
//     expire, and every event it writes is checked against its epoch in the same transaction, so
//     a replica resumed after its lease expired records nothing until it has joined again.
//   - The registry is the database's: any replica takes registrations and writes them there;
//     every replica reads it back every `sync_interval`.
//   - One event log numbered by the database. Every replica tails it into memory, so WatchEvents
//     on any replica streams every event in order and resumes from any sequence number. A notice
//     is recorded once per instance lifetime and notice key (and a revocation once per lifetime)
//     by a uniqueness rule, however many replicas (an old owner and a new one) report it.
//   - Agents may report to any replica: heartbeats are written to the database in batches, and
//     the instance's owner applies the heartbeat deadline.
//   - A write the database refuses is not acknowledged: a registration or an agent's report
//     fails (UNAVAILABLE, the caller retries), and a polled notice is tried again until it is
//     recorded. A notice this replica has read is never dropped for a lease lost or an instance
//     moved meanwhile (a poll in flight then, a write refused): it waits for this replica's next
//     lease and is recorded then, whichever replica polls the instance by that time. On a starved
//     host a notice may be late; it is not lost while a replica that read it, or the instance's
//     poller, runs.
//
// States: unknown -> healthy (a poll or heartbeat succeeded); healthy/unknown -> unknown + reason
// (a poll failed); any -> notice (a revocation notice; event KIND_NOTICE once per notice);
// notice -> revoked (its deadline passed; KIND_REVOKED); agent-fed instances whose heartbeats stop
// for lost_after_intervals intervals -> lost (KIND_LOST), and back to healthy (KIND_RECOVERED)
// when they resume. An instance registered before its VM has booted has no heartbeat yet: it is
// lost only if none comes within boot_grace of its registration. Rebalance and maintenance notices
// are events that leave the state alone. An agent's report that its command ended by itself ->
// exited (KIND_EXITED once; its lifetime ends, censored; no heartbeat is expected any more). A
// re-registration that starts a new lifetime (see Register) puts a revoked, lost or exited
// instance back to unknown, without an event.
#ifndef SPOTDNN_DETECTOR_DETECTOR_H_
#define SPOTDNN_DETECTOR_DETECTOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "detector/detector_observer.h"
#include "detector/detector_store.h"
#include "detector/hash_ring.h"
#include "detector/metadata_poller.h"
#include "detector/types.h"

namespace spotdnn::detector {

// How a detector runs.
struct DetectorOptions {
  // The store (db::ParseStoreSpec): a SQLite file (":memory:" keeps nothing across restarts) or a
  // postgres://… URI.
  std::string db_path = ":memory:";
  PollerOptions poller;                                  // for instances with a metadata endpoint
  absl::Duration heartbeat_interval = absl::Seconds(1);  // agents' heartbeat interval
  int lost_after_intervals = 3;  // missed heartbeat intervals before an instance is lost
  // How long a registered agent-fed instance may go without its first heartbeat (its VM boots
  // and starts the agent) before it is lost.
  absl::Duration boot_grace = absl::Minutes(10);
  std::string replica_id = "replica-0";
  size_t event_retention = 100000;  // newest events kept (memory and database)
  bool run_poller = true;           // false: only agents' reports feed it (tests)
  // Shared (PostgreSQL) stores only:
  absl::Duration lease = absl::Seconds(3);  // a replica's lease; renewed every lease/6
  absl::Duration sync_interval = absl::Milliseconds(500);  // registry read-back, heartbeat writes
  absl::Duration tail_interval = absl::Milliseconds(25);   // event log read-back
  // Time (wall clock for states and events, steady for leases, fencing and the loops' waits);
  // null: the real clock. Also the poller's when poller.clock is null. Outlives the detector.
  base::Clock* clock = nullptr;
  // Told of polls, notices and lease changes; null: nobody. Outlives the detector.
  DetectorObserver* observer = nullptr;
};

// The detector. Thread-safe.
class Detector {
 public:
  // Opens the store, reloads registrations, seen notices and events, and starts polling and the
  // deadline monitor. INVALID_ARGUMENT for bad options; UNAVAILABLE for a database that cannot be
  // opened.
  static absl::StatusOr<std::unique_ptr<Detector>> Open(DetectorOptions options);
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  // Registers (or updates) an instance. INVALID_ARGUMENT naming the field for an empty id, an id
  // or job id over limits::kMaxNameBytes, an endpoint over limits::kMaxTextBytes, an endpoint
  // that is not a base URL, or an endpoint without a cloud.
  //
  // Registering an id that is already known is idempotent (a registration forwarded between
  // replicas, a runner resuming its job, an agent reconnecting): the state, the notice deadline
  // and the keys of the notices already reported stay, so no notice is reported twice; only the
  // job, cloud and endpoint are updated. It starts a new lifetime instead (state unknown, reported
  // notice keys and deadline forgotten, polled afresh) when
  //   - the instance is revoked or lost: its id is in use again (an AWS instance started after a
  //     stop or hibernation, a GCE preemptible instance restarted), or
  //   - its metadata endpoint or cloud changed to another one: another machine answers for it.
  //     Giving an endpoint or a cloud to an instance that had none (an agent registered it
  //     first), or leaving them out, is no change (an unspecified cloud keeps the known one;
  //     an empty endpoint stops the polling).
  absl::Status Register(const WatchedInstance& instance);
  // NOT_FOUND when the instance is not registered.
  absl::Status Unregister(const std::string& instance_id);
  // An agent's heartbeat. Unknown instances are registered on the fly with `job_id`/`cloud`.
  // A non-empty `problem` (the agent cannot read its metadata service) makes it unknown with
  // that reason; the instance is alive all the same. Ids at most limits::kMaxNameBytes, the
  // problem at most limits::kMaxTextBytes (INVALID_ARGUMENT).
  absl::Status Heartbeat(const std::string& instance_id, const std::string& job_id, Cloud cloud,
                         int64_t unix_ms, const std::string& problem = "");
  // A notice an agent read; reported once per notice key. Registers unknown instances like
  // Heartbeat. INVALID_ARGUMENT for an empty key or kind, ids, key or action over
  // limits::kMaxNameBytes, or a detail over limits::kMaxTextBytes. Notices from the poller are
  // cut to those limits instead (BoundedKey for their keys).
  absl::Status ReportNotice(const std::string& instance_id, const std::string& job_id, Cloud cloud,
                            const Notice& notice, int64_t seen_unix_ms);
  // One round of polling (the poller's sink). A result whose tag is not the instance's lifetime
  // (registered_unix_ms) is an earlier lifetime's and is ignored. The notices of a poll that was
  // in flight when this replica stopped polling the instance (fenced, or the instance moved) are
  // still recorded; only the instance's poller changes its state.
  void HandlePollResult(const PollResult& result);

  // Registered instances (of one job, or all when `job_id` is empty), sorted by id.
  std::vector<WatchedInstance> List(const std::string& job_id) const;
  // One instance; NOT_FOUND when not registered.
  absl::StatusOr<WatchedInstance> Get(const std::string& instance_id) const;

  // Instance lifetimes for revocation models (spotdnn catalog hazards --from-detector), of one
  // instance type (or all when empty), oldest first: each lifetime that ended, from its
  // registration to its first revocation notice (revoked: at the notice's effective time, else
  // when seen) or to its unregistration, loss of heartbeats or a new lifetime (censored), as
  // recorded by this replica (the newest 100,000); then every registered instance still alive,
  // censored now. Instances registered before the detector kept start times are left out.
  absl::StatusOr<std::vector<Lifetime>> Lifetimes(const std::string& instance_type) const;

  // Up to `max` events with a sequence above `after` (of one job, or all), oldest first.
  // OUT_OF_RANGE when events after `after` were already trimmed by the retention, or when `after`
  // is past the newest event (the log was reset, or `after` came from another replica's log):
  // waiting there would skip every event until the numbering caught up. `scanned`, when given,
  // receives the last sequence examined (resume from there: filtered-out events count).
  absl::StatusOr<std::vector<Event>> EventsAfter(uint64_t after, const std::string& job_id,
                                                 size_t max, uint64_t* scanned = nullptr) const;
  // Waits until an event with a sequence above `after` exists; false on timeout or Shutdown().
  // The timeout is the caller's, in real time (a stream's wait), not on the detector's clock.
  bool WaitForEvents(uint64_t after, absl::Duration timeout) const;
  // The newest sequence number (0 before the first event).
  uint64_t last_sequence() const;

  // Applies heartbeat deadlines and notice deadlines at `now_unix_ms` (the monitor thread calls
  // this every tenth of a heartbeat interval on the detector's clock; tests may call it directly).
  void CheckDeadlines(int64_t now_unix_ms);

  // Scale-out: the replicas alive now (this one included). This replica polls the instances the
  // consistent-hash ring gives it; an empty list means it holds every instance. A shared detector
  // sets it itself from the leases.
  void SetLiveReplicas(const std::vector<std::string>& replicas);
  // The replicas on the ring now (empty: this one holds every instance).
  std::vector<std::string> LiveReplicas() const;
  // True when the store is shared by replicas (PostgreSQL).
  bool shared() const { return shared_; }
  // False while a shared replica holds no lease (it polls nothing and records nothing) or its
  // last database round failed; always true for a SQLite store.
  bool serving() const;
  // Times this replica joined (1 at start) and lost its lease.
  uint64_t lease_changes() const;
  // The replica that holds `instance_id` under the current ring.
  std::string OwnerOf(const std::string& instance_id) const;
  const std::string& replica_id() const { return options_.replica_id; }
  // Instances this replica polls now.
  size_t polled() const;
  // Instances registered (polled here, by another replica, or fed by agents).
  size_t watched() const;
  // Writes to the SQLite store that failed (the state and events stay in memory and are served;
  // a restart would not see them). The last failure's message is in last_store_error().
  uint64_t store_errors() const;
  std::string last_store_error() const;

  // Holds the detector's lock for `d`, as a thread descheduled while holding it on a busy host
  // does (tests of the lease loop, which must renew meanwhile).
  void HoldLockForTesting(absl::Duration d);

  // Wakes waiters and stops the poller and monitor. Idempotent.
  void Shutdown();

 private:
  struct Entry {
    StoredInstance stored;
    std::set<std::string> seen;  // notice keys already reported
    bool agent = false;          // heartbeats arrive here
    bool polled = false;         // in this replica's poller
    int64_t written_ms = 0;      // when this replica last registered it (shared)
  };
  // A polled notice a shared store did not take yet (refused, or read while fenced). Kept until
  // recorded (here or by another replica) or the instance's lifetime ends, whoever polls the
  // instance meanwhile.
  struct PendingNotice {
    std::string instance_id;
    int64_t lifetime_ms;
    Notice notice;
    int64_t seen_unix_ms;
  };
  explicit Detector(DetectorOptions options);
  absl::Status Load();
  // Appends an event for `entry` (persisted before it is visible). Caller holds mu_.
  // Shared: whether it was recorded (false: another replica had recorded it), or the store's
  // error. A single replica always records it (a failed write is counted in store_errors).
  absl::StatusOr<bool> AppendLocked(Entry& entry, EventKind kind, const std::string& action,
                                    int64_t notice_unix_ms, int64_t effective_unix_ms,
                                    const std::string& detail, const std::string& seen_key);
  // Adds an event to the in-memory log, dropping the oldest past the retention (true when it
  // dropped one). Caller holds mu_.
  bool KeepLocked(Event event);
  void PersistLocked(const Entry& entry);
  // Counts a failed store write. Caller holds mu_.
  void StoreResultLocked(const absl::Status& status);
  // Applies a notice to an entry. Caller holds mu_. OK, or (shared) the store's error: nothing
  // changed then.
  absl::Status NoticeLocked(Entry& entry, const Notice& notice, int64_t seen_unix_ms);
  // Shared: keeps a notice the store did not take for RetryPending (once per instance and key).
  // Caller holds mu_.
  void QueuePendingLocked(const Entry& entry, const Notice& notice, int64_t seen_unix_ms);
  // Shared: the registration as the database has it now, merged into `entry` (a new lifetime
  // there replaces this replica's view; none there leaves a fresh entry). Whether it has one.
  // Caller holds mu_.
  absl::StatusOr<bool> RefreshLocked(Entry& entry);
  // Shared: the background loop (registry and event read-back, heartbeat writes, pending
  // notices) and its steps, on its own connection (shared_store_).
  void SharedLoop();
  // Shared: the lease loop (renew every lease/6, the live set every lease/10, join again after a
  // loss), on a connection of its own (lease_store_). It never takes mu_: on a busy host a thread
  // holding mu_ can be descheduled for seconds, and a renewal queued behind it lost the lease (seen
  // at load 20 on 2 cores: the renewal itself took 0-336 ms, the wait for mu_ up to 2 s). What it
  // learns it leaves in held_epoch_/renewed_at_ms_ and lease_news_; the monitor applies that under
  // mu_ (ApplyLeaseLocked).
  void LeaseLoop();
  void RenewLease();
  // Takes the lease with a new epoch (at start, and after a loss). The store's error.
  absl::Status Join();
  // Reads the replicas holding leases into lease_news_. The store's error.
  absl::Status ReadLiveReplicas();
  // Applies what the lease loop learnt: fences when the lease is lost or was not renewed for 2/3
  // of its length, adopts a newly joined epoch, puts the live replicas on the ring, counts the
  // lease connection's errors. Caller holds mu_.
  void ApplyLeaseLocked();
  // SetLiveReplicas under mu_: whether the set changed.
  bool SetLiveReplicasLocked(std::vector<std::string> replicas);
  // Stops holding anything until the lease is taken again. Caller holds mu_.
  void FenceLocked(const std::string& why);
  // Adopts a registration read back from the database. Caller holds mu_.
  void MergeLocked(Entry& entry, const StoredInstance& row);
  void SyncRegistry();
  void TailEvents();
  // Notes notice keys the log holds as reported, for the entries of the same lifetime. Caller
  // holds mu_.
  void LearnKeysLocked(const std::vector<RecordedKey>& keys);
  void RetryPending();
  void HeartbeatLocked(Entry& entry, int64_t unix_ms, const std::string& problem = "");
  // Records the end of an entry's current lifetime (when its start is known). Caller holds mu_.
  void EndLifetimeLocked(const Entry& entry, int64_t ended_unix_ms, bool revoked,
                         const std::string& how);
  Entry& EnsureLocked(const std::string& instance_id, const std::string& job_id, Cloud cloud);
  // Adds/removes poll targets after a registration or ring change. Caller holds mu_.
  void ReconcilePollingLocked(Entry& entry);
  bool HoldsLocked(const std::string& instance_id) const;
  void MonitorLoop();

  DetectorOptions options_;
  base::Clock& clock_;
  DetectorObserver& observer_;
  std::unique_ptr<DetectorStore> store_;
  std::unique_ptr<MetadataPoller> poller_;
  mutable std::mutex mu_;
  mutable std::condition_variable event_cv_;
  std::condition_variable stop_cv_;
  bool shutdown_ = false;
  std::map<std::string, Entry> entries_;
  std::deque<Event> events_;
  uint64_t next_sequence_ = 1;
  uint64_t first_retained_ = 1;
  uint64_t store_errors_ = 0;
  std::string last_store_error_;
  HashRing ring_;
  std::thread monitor_;

  // Shared stores.
  bool shared_ = false;
  std::unique_ptr<DetectorStore> shared_store_;  // the background loop's connection
  std::thread shared_loop_;
  // The lease's own connection and thread (join, renew, the live set), so that nothing else the
  // replica asks of the database can hold a renewal up.
  std::unique_ptr<DetectorStore> lease_store_;
  std::thread lease_loop_;
  bool wake_tail_ = false;  // guarded by mu_: an event was appended
  // Written under mu_: no valid lease; holds nothing. Atomic so that the lease loop reads it
  // without mu_.
  std::atomic<bool> fenced_{false};
  // Written under mu_: the epoch this replica records under (atomic for the lease loop).
  std::atomic<int64_t> epoch_{0};
  // The lease loop's side, never under mu_: the epoch it holds in the database (0: none), and
  // what it read that the monitor has not applied yet.
  std::atomic<int64_t> held_epoch_{0};
  struct LeaseNews {
    std::optional<std::vector<std::string>> live;  // the live replicas, newest read
    std::optional<bool> ok;                        // whether the newest database round worked
    uint64_t errors = 0;                           // failed rounds
    absl::Status last_error;
  };
  // Notes a lease round's answer in lease_news_. Takes lease_mu_.
  void NoteLeaseAnswer(const absl::Status& status);
  std::mutex lease_mu_;
  std::condition_variable lease_cv_;
  bool lease_stop_ = false;     // guarded by lease_mu_
  LeaseNews lease_news_;        // guarded by lease_mu_
  uint64_t tail_cursor_ = 0;    // guarded by mu_: newest sequence read back
  bool store_ok_ = true;        // guarded by mu_: the background loop's last round
  uint64_t lease_changes_ = 0;  // guarded by mu_
  // When the held lease was last renewed (clock_.SteadyMs() when the renewal was sent); the
  // monitor fences past 2/3 of a lease.
  std::atomic<int64_t> renewed_at_ms_{0};
  std::map<std::string, int64_t> pending_heartbeats_;  // guarded by mu_
  // Unregistered here, and when (a registry read that began earlier must not bring them back).
  std::map<std::string, int64_t> unregistered_;  // guarded by mu_
  std::vector<PendingNotice> pending_notices_;   // guarded by mu_
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_DETECTOR_H_
