#include "provisioner/launcher/checkpoint_sync.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace spotdnn::launcher {
namespace {

namespace fs = std::filesystem;

// Whether a relative path names a file the sync leaves alone (temporary files).
bool Ignored(const fs::path& relative) {
  const std::string name = relative.filename().string();
  return name.empty() || name[0] == '.' || absl::EndsWith(name, ".tmp");
}

class S3ObjectStore final : public ObjectStore {
 public:
  S3ObjectStore(std::shared_ptr<S3Client> client, std::string bucket)
      : client_(std::move(client)), bucket_(std::move(bucket)) {}
  absl::StatusOr<std::vector<StoredObject>> List(const std::string& prefix) override {
    auto objects = client_->ListObjects(bucket_, prefix);
    if (!objects.ok()) return objects.status();
    std::vector<StoredObject> out;
    out.reserve(objects->size());
    for (const S3Object& o : *objects) out.push_back({o.key, o.size});
    return out;
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    return client_->GetObject(bucket_, key);
  }
  absl::Status Put(const std::string& key, const std::string& body) override {
    return client_->PutObject(bucket_, key, body);
  }
  std::string Describe(const std::string& key) const override {
    return absl::StrCat("s3://", bucket_, "/", key);
  }

 private:
  std::shared_ptr<S3Client> client_;
  std::string bucket_;
};

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

class RefreshingS3Store final : public ObjectStore {
 public:
  RefreshingS3Store(S3Client::Options options, std::string bucket,
                    std::function<absl::StatusOr<AwsCredentials>()> resolve)
      : options_(std::move(options)), bucket_(std::move(bucket)), resolve_(std::move(resolve)) {}

  absl::Status Build() {
    absl::StatusOr<std::unique_ptr<S3Client>> client = S3Client::Create(options_);
    if (!client.ok()) return client.status();
    store_ = MakeS3ObjectStore(std::shared_ptr<S3Client>(std::move(*client)), bucket_);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StoredObject>> List(const std::string& prefix) override {
    return WithRefresh([&](ObjectStore& s) { return s.List(prefix); });
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    return WithRefresh([&](ObjectStore& s) { return s.Get(key); });
  }
  absl::Status Put(const std::string& key, const std::string& body) override {
    return WithRefresh([&](ObjectStore& s) { return s.Put(key, body); });
  }
  std::string Describe(const std::string& key) const override { return store_->Describe(key); }

 private:
  template <typename F>
  auto WithRefresh(F call) -> decltype(call(std::declval<ObjectStore&>())) {
    auto result = call(*store_);
    if (!absl::IsUnauthenticated(StatusOf(result)) || !resolve_) return result;
    absl::StatusOr<AwsCredentials> fresh = resolve_();
    if (!fresh.ok()) return result;
    const AwsCredentials previous = options_.credentials;
    options_.credentials = *fresh;
    if (!Build().ok()) {
      options_.credentials = previous;
      return result;
    }
    return call(*store_);
  }

  S3Client::Options options_;
  std::string bucket_;
  std::function<absl::StatusOr<AwsCredentials>()> resolve_;
  std::unique_ptr<ObjectStore> store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ObjectStore>> MakeRefreshingS3ObjectStore(
    S3Client::Options options, std::string bucket,
    std::function<absl::StatusOr<AwsCredentials>()> resolve) {
  auto store = std::make_unique<RefreshingS3Store>(std::move(options), std::move(bucket),
                                                   std::move(resolve));
  if (absl::Status s = store->Build(); !s.ok()) return s;
  return std::unique_ptr<ObjectStore>(std::move(store));
}

absl::StatusOr<SyncCounts> CopyCheckpoint(ObjectStore& from, const std::string& from_prefix,
                                          ObjectStore& to, const std::string& to_prefix) {
  const std::string list_prefix = from_prefix.empty() ? "" : from_prefix + "/";
  absl::StatusOr<std::vector<StoredObject>> objects = from.List(list_prefix);
  if (!objects.ok()) {
    return absl::Status(
        objects.status().code(),
        absl::StrCat("listing ", from.Describe(list_prefix), ": ", objects.status().message()));
  }
  SyncCounts counts;
  for (const StoredObject& object : *objects) {
    const std::string relative = object.key.substr(list_prefix.size());
    if (relative.empty() || Ignored(fs::path(relative))) {
      ++counts.skipped;
      continue;
    }
    absl::StatusOr<std::string> body = from.Get(object.key);
    if (!body.ok()) {
      return absl::Status(body.status().code(), absl::StrCat("reading ", from.Describe(object.key),
                                                             ": ", body.status().message()));
    }
    const std::string key = to_prefix.empty() ? relative : absl::StrCat(to_prefix, "/", relative);
    if (absl::Status s = to.Put(key, *body); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("writing ", to.Describe(key), ": ", s.message()));
    }
    ++counts.files;
    counts.bytes += static_cast<int64_t>(body->size());
  }
  return counts;
}

bool WriteAll(int fd, absl::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the folder of \"", path, "\": ", ec.message()));
  }
  const fs::path tmp = target.parent_path() /
                       absl::StrCat(".", target.filename().string(), ".spotdnn-tmp-", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write \"", tmp.string(), "\": ", std::strerror(errno)));
  }
  const bool ok = WriteAll(fd, content) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write \"", tmp.string(), "\": ", std::strerror(saved)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename onto \"", path, "\": ", std::strerror(why)));
  }
  return absl::OkStatus();
}

std::unique_ptr<ObjectStore> MakeS3ObjectStore(std::shared_ptr<S3Client> client,
                                               std::string bucket) {
  return std::make_unique<S3ObjectStore>(std::move(client), std::move(bucket));
}

CheckpointSync::CheckpointSync(ObjectStore* store, std::string prefix, std::string dir)
    : store_(store), prefix_(std::move(prefix)), dir_(std::move(dir)) {}

std::string CheckpointSync::KeyFor(const std::string& relative) const {
  return prefix_.empty() ? relative : absl::StrCat(prefix_, "/", relative);
}

absl::StatusOr<SyncCounts> CheckpointSync::Restore() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint_dir = \"", dir_, "\": cannot create it: ", ec.message()));
  }
  const std::string list_prefix = prefix_.empty() ? "" : prefix_ + "/";
  absl::StatusOr<std::vector<StoredObject>> objects = store_->List(list_prefix);
  if (!objects.ok()) return objects.status();
  SyncCounts counts;
  for (const StoredObject& object : *objects) {
    std::string relative = object.key.substr(list_prefix.size());
    bool safe = !relative.empty() && relative.front() != '/' && relative.back() != '/';
    for (absl::string_view part : absl::StrSplit(relative, '/')) {
      if (part.empty() || part == "." || part == "..") safe = false;
    }
    if (!safe || Ignored(fs::path(relative))) {
      ++counts.skipped;  // a folder marker, or a key that is no file under the folder
      continue;
    }
    absl::StatusOr<std::string> body = store_->Get(object.key);
    if (!body.ok()) return body.status();
    const fs::path local = fs::path(dir_) / relative;
    if (absl::Status s = WriteFileAtomically(local.string(), *body); !s.ok()) return s;
    struct stat st {};
    if (::stat(local.c_str(), &st) == 0) {
      synced_[relative] = {
          static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
    }
    ++counts.files;
    counts.bytes += static_cast<int64_t>(body->size());
  }
  return counts;
}

absl::StatusOr<SyncCounts> CheckpointSync::Upload() {
  struct Candidate {
    std::string relative;
    FileState state;
  };
  std::vector<Candidate> candidates;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return SyncCounts{};
  for (auto it = fs::recursive_directory_iterator(
           dir_, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const fs::path relative = fs::relative(it->path(), dir_, ec);
    if (ec || Ignored(relative)) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0) continue;  // gone since the listing
    FileState state{static_cast<int64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
    auto known = synced_.find(relative.string());
    if (known != synced_.end() && known->second == state) continue;
    candidates.push_back({relative.string(), state});
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint_dir = \"", dir_, "\": cannot list it: ", ec.message()));
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.state.mtime_ns != b.state.mtime_ns ? a.state.mtime_ns < b.state.mtime_ns
                                                : a.relative < b.relative;
  });
  SyncCounts counts;
  for (const Candidate& c : candidates) {
    const fs::path local = fs::path(dir_) / c.relative;
    std::string body;
    {
      std::ifstream in(local, std::ios::binary);
      if (!in) {
        ++counts.skipped;  // removed since the listing
        continue;
      }
      std::ostringstream buffer;
      buffer << in.rdbuf();
      body = buffer.str();
    }
    // A file still being written is sent next round, when it holds still.
    struct stat st {};
    if (::stat(local.c_str(), &st) != 0 || st.st_size != c.state.size ||
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec !=
            c.state.mtime_ns ||
        static_cast<int64_t>(body.size()) != c.state.size) {
      ++counts.skipped;
      continue;
    }
    if (absl::Status s = store_->Put(KeyFor(c.relative), body); !s.ok()) return s;
    synced_[c.relative] = c.state;
    ++counts.files;
    counts.bytes += static_cast<int64_t>(body.size());
  }
  return counts;
}

}  // namespace spotdnn::launcher
