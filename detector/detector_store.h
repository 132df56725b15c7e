// The detector's store (SQLite or PostgreSQL, services/common/db): registrations (with state), the
// notice keys already reported, and the event log. A restarted detector reloads all three, so it
// neither loses nor repeats events.
#ifndef SPOTDNN_DETECTOR_DETECTOR_STORE_H_
#define SPOTDNN_DETECTOR_DETECTOR_STORE_H_

#include <cstdint>
#include <memory>
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

// Persistence (services/common/db). Not thread-safe: the detector calls it under its lock.
class DetectorStore {
 public:
  // Opens (creating or migrating its schema) the store at `spec`: a file (PATH or sqlite:PATH;
  // ":memory:" keeps nothing) or a postgres://… URI (see db::ParseStoreSpec). INVALID_ARGUMENT for
  // a bad spec; UNAVAILABLE naming it when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<DetectorStore>> Open(const std::string& spec);
  ~DetectorStore();
  DetectorStore(const DetectorStore&) = delete;
  DetectorStore& operator=(const DetectorStore&) = delete;

  absl::StatusOr<std::vector<StoredInstance>> LoadInstances();
  // (instance_id, key) pairs of notices already reported.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadSeen();
  // The newest `limit` events, oldest first.
  absl::StatusOr<std::vector<Event>> LoadEvents(size_t limit);

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
  // Deletes events with a sequence below `first_kept`.
  absl::Status TrimEvents(uint64_t first_kept);
  // Records a lifetime that ended (revoked, or censored when unregistered or lost).
  absl::Status AddLifetime(const Lifetime& lifetime);
  // The newest `limit` recorded lifetimes (of one instance type, or all when it is empty).
  absl::StatusOr<std::vector<Lifetime>> LoadLifetimes(const std::string& instance_type,
                                                      size_t limit);

 private:
  explicit DetectorStore(std::unique_ptr<db::Database> db);
  std::unique_ptr<db::Database> db_;
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_DETECTOR_STORE_H_
