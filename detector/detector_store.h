// The detector's store (SQLite or PostgreSQL, base/db): registrations (with state), the
// notice keys already reported, and the event log. A restarted detector reloads all three, so it
// neither loses nor repeats events.
#ifndef SPOTDNN_DETECTOR_DETECTOR_STORE_H_
#define SPOTDNN_DETECTOR_DETECTOR_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "detector/types.h"

namespace spotdnn::db {
class Database;
}  // namespace spotdnn::db

namespace spotdnn::detector {

// A registration as stored, with the state the detector had reached.
struct StoredInstance {
  WatchedInstance instance;
  int64_t notice_effective_unix_ms = 0;  // deadline of the outstanding notice
};

// Shared: a notice key the event log holds for an instance's lifetime (recorded once there).
struct RecordedKey {
  std::string instance_id;
  int64_t lifetime_ms = 0;  // the lifetime's registered_unix_ms
  std::string key;
};

// One row of the replicas table: a replica's lease.
struct Lease {
  std::string replica_id;
  int64_t epoch = 0;
  int64_t expires_unix_ms = 0;  // on the database's clock
};

// Persistence (base/db). Not thread-safe: the detector calls it under its lock (a
// shared detector opens a second one for its background work).
//
// On PostgreSQL the store is shared by every replica (see Detector): the registry, one event log
// numbered by the database (a sequence; writers append under the store's lock, so sequence order
// is commit order and a reader that sees N has seen everything below N), a uniqueness rule that
// records a notice once per instance lifetime however many replicas report it, and the replicas'
// leases, judged on the database's clock so that replicas' clocks do not matter.
class DetectorStore {
 public:
  // Opens (creating or migrating its schema) the store at `spec`: a file (PATH or sqlite:PATH;
  // ":memory:" keeps nothing) or a postgres://… URI (see db::ParseStoreSpec). INVALID_ARGUMENT for
  // a bad spec; UNAVAILABLE naming it when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<DetectorStore>> Open(const std::string& spec);
  ~DetectorStore();
  DetectorStore(const DetectorStore&) = delete;
  DetectorStore& operator=(const DetectorStore&) = delete;

  // Retries a failed statement once, after reconnecting (about 0.1 s), instead of for seconds:
  // the detector calls its store under the lock every request takes.
  void RetryBriefly();

  // True on PostgreSQL: several replicas share this store.
  bool shared() const;

  absl::StatusOr<std::vector<StoredInstance>> LoadInstances();
  // One registration; nullopt when it is not registered.
  absl::StatusOr<std::optional<StoredInstance>> LoadInstance(const std::string& instance_id);
  // (instance_id, key) pairs of notices already reported.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadSeen();
  // The newest `limit` events, oldest first; `keys`, when given, receives the notice keys among
  // them (shared stores keep them with the event).
  absl::StatusOr<std::vector<Event>> LoadEvents(size_t limit,
                                                std::vector<RecordedKey>* keys = nullptr);

  // Inserts or replaces a registration.
  absl::Status PutInstance(const StoredInstance& instance);
  // Stores a registration and deletes its seen keys, in one transaction (a new lifetime of an
  // instance id).
  absl::Status ResetInstance(const StoredInstance& instance);
  // Deletes a registration and its seen keys (its events stay in the log).
  absl::Status DeleteInstance(const std::string& instance_id);
  // Appends `event`, stores the instance's new state and (when not empty) the seen key, in one
  // transaction.
  absl::Status AppendEvent(const Event& event, const StoredInstance& instance,
                           const std::string& seen_key);
  // Shared: appends `event` (its sequence is the database's) unless an event with the same
  // `dedupe` key (when not empty) was recorded for the instance's lifetime `lifetime_ms`, and
  // stores the instance's new state (an update: a registration deleted meanwhile stays deleted),
  // in one transaction that first checks that `replica_id` still holds its lease of `epoch`
  // (FAILED_PRECONDITION naming both when not: a replica that was paused past its lease writes
  // nothing). True when appended, false when the key was taken.
  absl::StatusOr<bool> AppendSharedEvent(const Event& event, int64_t lifetime_ms,
                                         const std::string& dedupe, const StoredInstance& instance,
                                         const std::string& replica_id, int64_t epoch);
  // Shared: stores an instance's state if its lifetime (registered_unix_ms) is still the
  // registered one; the heartbeat time only moves forward.
  absl::Status UpdateInstanceState(const StoredInstance& instance);
  // Shared: moves heartbeat times forward, in one transaction.
  absl::Status FlushHeartbeats(const std::vector<std::pair<std::string, int64_t>>& heartbeats);
  // Up to `limit` events with a sequence above `after`, oldest first; `keys` as for LoadEvents.
  absl::StatusOr<std::vector<Event>> EventsAfter(uint64_t after, size_t limit,
                                                 std::vector<RecordedKey>* keys = nullptr);

  // Leases. Join takes (or takes over) `replica_id`'s row with a new epoch (larger than any that
  // id had, its row forgotten or not), valid for `lease_ms`, and deletes the rows of leases
  // expired 20 leases ago (replicas that are gone: pods come with new ids); Renew extends it while
  // it is still held with `epoch` and unexpired (false when it was lost); Leave ends it at once
  // (the others take its instances without waiting). None of them waits for the store's writer
  // lock (a replica appending events does not hold a join up).
  absl::StatusOr<int64_t> JoinLease(const std::string& replica_id, int64_t lease_ms);
  absl::StatusOr<bool> RenewLease(const std::string& replica_id, int64_t epoch, int64_t lease_ms);
  absl::Status LeaveLease(const std::string& replica_id, int64_t epoch);
  // The unexpired leases, by replica id.
  absl::StatusOr<std::vector<Lease>> LiveLeases();

  // Deletes events with a sequence below `first_kept`.
  absl::Status TrimEvents(uint64_t first_kept);
  // Records a lifetime that ended (revoked, or censored when unregistered or lost).
  absl::Status AddLifetime(const Lifetime& lifetime);
  // The newest `limit` recorded lifetimes (of one instance type, or all when it is empty).
  absl::StatusOr<std::vector<Lifetime>> LoadLifetimes(const std::string& instance_type,
                                                      size_t limit);

 private:
  explicit DetectorStore(std::unique_ptr<db::Database> db);
  // The database's clock in Unix milliseconds, as an SQL expression.
  const char* NowMs() const;
  std::unique_ptr<db::Database> db_;
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_DETECTOR_STORE_H_
