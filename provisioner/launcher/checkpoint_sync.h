// Keeps an instance's local checkpoint folder (SPOTDNN_CHECKPOINT_DIR) in sync with an object
// store prefix (SPOTDNN_CHECKPOINT_URI, s3://BUCKET/PREFIX): Restore downloads the prefix into the
// folder before the training process starts; Upload sends the files that are new or changed since
// they were last sent (oldest first, so a manifest written after its checkpoint goes after it).
// Deletions are not propagated. Files whose name starts with '.' or ends with ".tmp" are never
// uploaded (write a checkpoint to such a name and rename it when complete).
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_CHECKPOINT_SYNC_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_CHECKPOINT_SYNC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/launcher/s3_client.h"

namespace spotdnn::launcher {

// Writes all of `data` to `fd`, retrying short writes and EINTR; false on another error (errno
// says which).
bool WriteAll(int fd, absl::string_view data);

// Writes `content` to a temporary file beside `path` (a dot file), syncs it and renames it over
// `path`, creating the parent folders: a reader sees the old file or the whole new one. The error
// names the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);

// One object of a store listing.
struct StoredObject {
  std::string key;
  int64_t size = 0;
};

// Where checkpoints are kept: keys and bytes (an S3 bucket, or a fake in tests).
class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Every object whose key starts with `prefix`.
  virtual absl::StatusOr<std::vector<StoredObject>> List(const std::string& prefix) = 0;
  virtual absl::StatusOr<std::string> Get(const std::string& key) = 0;
  virtual absl::Status Put(const std::string& key, const std::string& body) = 0;
  // How to name a key in messages ("s3://bucket/key").
  virtual std::string Describe(const std::string& key) const = 0;
};

// `bucket` of `client` as an ObjectStore.
std::unique_ptr<ObjectStore> MakeS3ObjectStore(std::shared_ptr<S3Client> client,
                                               std::string bucket);

// `bucket` through a client made from `options`; when S3 refuses the credentials
// (UNAUTHENTICATED: expired instance-role credentials), they are resolved again with `resolve` and
// the call is made once more. INVALID_ARGUMENT for options S3Client::Create refuses.
absl::StatusOr<std::unique_ptr<ObjectStore>> MakeRefreshingS3ObjectStore(
    S3Client::Options options, std::string bucket,
    std::function<absl::StatusOr<AwsCredentials>()> resolve);

// What one Restore or Upload did.
struct SyncCounts {
  int files = 0;      // downloaded or uploaded
  int64_t bytes = 0;  // their bytes
  int skipped = 0;    // keys that cannot be a file under the folder; files that changed mid-read
};

// Copies every object under `from_prefix` in `from` to the same relative key under `to_prefix` in
// `to` (both without a trailing '/'; empty: the whole store), as a checkpoint follows a job that
// moved to another region's bucket. Objects are read and written one at a time, oldest listing
// order kept; the first error stops the copy and names the key. Temporary files (a name starting
// with '.' or ending in ".tmp") are skipped and counted, as the sync never uploads them.
absl::StatusOr<SyncCounts> CopyCheckpoint(ObjectStore& from, const std::string& from_prefix,
                                          ObjectStore& to, const std::string& to_prefix);

// Copies a job's checkpoint folder from `from_uri` to `to_uri` (s3://BUCKET/PREFIX each: a bucket
// per region), each side signed in its own region (empty: the caller's default), and says what it
// copied. Errors name the object and the side. (MakeS3CheckpointCopier makes one.)
using CheckpointCopier = std::function<absl::StatusOr<SyncCounts>(
    const std::string& from_uri, const std::string& from_region, const std::string& to_uri,
    const std::string& to_region)>;

// The sync of one folder with one prefix. Not thread-safe.
class CheckpointSync {
 public:
  // `prefix` without a trailing '/' (empty: the whole store); `dir` is created when needed.
  CheckpointSync(ObjectStore* store, std::string prefix, std::string dir);

  // Downloads every object under the prefix into the folder (replacing files of the same name).
  // Keys that would land outside the folder ("..", absolute) are skipped and counted.
  absl::StatusOr<SyncCounts> Restore();
  // Uploads the files that are new or changed (size or modification time) since this object last
  // downloaded or uploaded them. The first error stops the round (the rest go next round).
  absl::StatusOr<SyncCounts> Upload();

 private:
  struct FileState {
    int64_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const FileState& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
  };
  std::string KeyFor(const std::string& relative) const;

  ObjectStore* store_;
  std::string prefix_;
  std::string dir_;
  std::map<std::string, FileState> synced_;  // relative path -> state when last synced
};

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_CHECKPOINT_SYNC_H_
