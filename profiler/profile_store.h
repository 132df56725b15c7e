// The profiler's database: runs (jobs), samples and versioned workload profiles, in SQLite (WAL
// mode, so readers never block the writer and a crash mid-write leaves the last commit intact) or
// PostgreSQL (base/db).
// Profiles are kept as the JSON document the CLI's --workload FILE reads; this library does not
// interpret it.
#ifndef SPOTDNN_PROFILER_PROFILE_STORE_H_
#define SPOTDNN_PROFILER_PROFILE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "profiler/sample.h"

namespace spotdnn::db {
class Database;
}  // namespace spotdnn::db

namespace spotdnn::profiler {

// One stored version of a profile.
struct StoredProfile {
  std::string name{};
  int version = 0;
  std::string json{};  // the profile document
  double created_unix_s = 0;
};

// A job the store holds samples of.
// One worker's progress in a job, from its samples.
struct WorkerProgress {
  std::string worker_id{};
  std::string instance_type{};
  std::int64_t steps = 0;    // its highest step: the iterations it has done
  std::int64_t samples = 0;  // how many samples it reported
  double last_wall_time_s = 0;
  double last_loss = 0;  // the loss of its highest step (0 when it reports none)
  // Its lowest numbered step and earliest wall time (0: none): where a stream started, e.g. the
  // step a restarted rank resumed from.
  std::int64_t first_step = 0;
  double first_wall_time_s = 0;
};

struct StoredRun {
  std::string job_id{};
  std::string source{};  // where its samples came from (file, "grpc")
  std::int64_t samples = 0;
};

// Thread-safe; several processes may open the same store (SQLite locking with a busy timeout of
// 10 s, or PostgreSQL).
class ProfileStore {
 public:
  // Opens (creating or migrating its schema) the store at `spec`: a file (PATH or sqlite:PATH, its
  // folder created too; ":memory:" for a private in-memory store) or a postgres://… URI (see
  // db::ParseStoreSpec). INVALID_ARGUMENT for a bad spec; UNAVAILABLE naming it when the store
  // cannot be opened.
  static absl::StatusOr<std::unique_ptr<ProfileStore>> Open(const std::string& spec);
  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  // Adds samples in one transaction: all of them or, on any error, none. Every sample is
  // validated first (INVALID_ARGUMENT "samples[i]: reason"). `source` is recorded per job.
  // Idempotent: a sample is identified by (job_id, worker_id, step), and one whose key is already
  // stored (a resend, or a repeat within `samples`) is left out, the first one kept. Step 0 means
  // "no step number": such samples are identified by all their fields (only an identical one is
  // left out). Returns how many samples were newly stored; once it returns, they are committed.
  absl::StatusOr<std::uint64_t> AddSamples(absl::Span<const Sample> samples,
                                           const std::string& source);
  // Samples of the given jobs (every job when empty), in the order they were stored. A job id
  // also names the runs an import split it into: "J" reads "J", "J/run-1", "J/zone/run-2".
  absl::StatusOr<std::vector<Sample>> LoadSamples(absl::Span<const std::string> job_ids);
  // Every job with its sample count.
  absl::StatusOr<std::vector<StoredRun>> ListRuns();
  // Number of samples stored (of the given jobs; every job when empty): the number LoadSamples
  // would return, a job id naming its runs too ("J/...") and every sample counted once.
  absl::StatusOr<std::int64_t> CountSamples(absl::Span<const std::string> job_ids = {});
  // Each worker of the job with its highest step and its number of (distinct) samples, by worker
  // id (empty for an unknown job).
  absl::StatusOr<std::vector<WorkerProgress>> JobProgress(const std::string& job_id);

  // Stores the next version of profile `name` (1 for a new name) and returns the version.
  // `document` makes the JSON for that version inside the transaction, so that the stored
  // document can carry its own version number. INVALID_ARGUMENT for an empty name.
  absl::StatusOr<int> PutProfile(const std::string& name,
                                 const std::function<std::string(int version)>& document);
  // Version `version` of `name` (0 = latest). NOT_FOUND names the profile and version.
  absl::StatusOr<StoredProfile> GetProfile(const std::string& name, int version = 0);
  // The latest version of every profile, by name.
  absl::StatusOr<std::vector<StoredProfile>> ListProfiles();
  // Deletes version `version` of `name` (0 = all versions); returns how many were deleted.
  // NOT_FOUND when nothing matched.
  absl::StatusOr<int> DeleteProfile(const std::string& name, int version = 0);

 private:
  explicit ProfileStore(std::unique_ptr<db::Database> db);

  absl::Mutex mu_;
  std::unique_ptr<db::Database> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_PROFILE_STORE_H_
