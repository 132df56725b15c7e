// The checkpoint folder's sync with a store prefix: restore, upload of new and changed files only,
// temporary files left alone, manifests after the checkpoints they name, unsafe keys refused;
// and the same against the fake S3 endpoint; a checkpoint's copy to another region's bucket.
#include "provisioner/launcher/checkpoint_sync.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/provider_factory.h"
#include "tests/launcher/fake_s3.h"

namespace spotdnn::launcher {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// A store in memory that records the order of uploads.
class MemoryStore final : public ObjectStore {
 public:
  absl::StatusOr<std::vector<StoredObject>> List(const std::string& prefix) override {
    std::vector<StoredObject> out;
    for (const auto& [key, body] : objects) {
      if (key.rfind(prefix, 0) == 0) out.push_back({key, static_cast<int64_t>(body.size())});
    }
    return out;
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    auto it = objects.find(key);
    if (it == objects.end()) return absl::NotFoundError(key);
    return it->second;
  }
  absl::Status Put(const std::string& key, const std::string& body) override {
    if (fail_puts) return absl::UnavailableError("store down");
    objects[key] = body;
    puts.push_back(key);
    return absl::OkStatus();
  }
  std::string Describe(const std::string& key) const override { return "mem://" + key; }

  std::map<std::string, std::string> objects;
  std::vector<std::string> puts;
  bool fail_puts = false;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

// Sets a file's modification time to `seconds` after the epoch (so order does not depend on the
// file system's clock granularity).
void SetMtime(const fs::path& p, int64_t seconds) {
  fs::last_write_time(
      p, fs::file_time_type::clock::now() + std::chrono::seconds(seconds - 1'800'000'000));
}

class CheckpointSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("checkpoint_sync_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointSyncTest, UploadsNewAndChangedFilesOnlyOldestFirst) {
  MemoryStore store;
  CheckpointSync sync(&store, "ckpt/job-1", (dir_ / "local").string());
  Write(dir_ / "local" / "ps-0.json", R"({"step": 40, "file": "model-40.pt"})");
  Write(dir_ / "local" / "model-40.pt", "weights at 40");
  Write(dir_ / "local" / "sub" / "opt.pt", "optimizer");
  Write(dir_ / "local" / ".model-50.pt.partial", "half");
  Write(dir_ / "local" / "model-50.pt.tmp", "half");
  SetMtime(dir_ / "local" / "model-40.pt", 1'800'000'000);
  SetMtime(dir_ / "local" / "sub" / "opt.pt", 1'800'000'001);
  SetMtime(dir_ / "local" / "ps-0.json", 1'800'000'002);
  auto first = sync.Upload();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->files, 3);
  // The manifest, written last, goes last; temporary files stay local.
  EXPECT_THAT(store.puts, ElementsAre("ckpt/job-1/model-40.pt", "ckpt/job-1/sub/opt.pt",
                                      "ckpt/job-1/ps-0.json"));
  EXPECT_EQ(store.objects.at("ckpt/job-1/model-40.pt"), "weights at 40");

  // Nothing changed: nothing goes.
  EXPECT_EQ(sync.Upload()->files, 0);
  // A new checkpoint and a rewritten manifest go.
  Write(dir_ / "local" / "model-50.pt", "weights at 50");
  Write(dir_ / "local" / "ps-0.json", R"({"step": 50, "file": "model-50.pt"})");
  SetMtime(dir_ / "local" / "model-50.pt", 1'800'000'010);
  SetMtime(dir_ / "local" / "ps-0.json", 1'800'000'011);
  store.puts.clear();
  EXPECT_EQ(sync.Upload()->files, 2);
  EXPECT_THAT(store.puts, ElementsAre("ckpt/job-1/model-50.pt", "ckpt/job-1/ps-0.json"));
  EXPECT_EQ(store.objects.at("ckpt/job-1/ps-0.json"), R"({"step": 50, "file": "model-50.pt"})");
}

TEST_F(CheckpointSyncTest, AFailedUploadIsRetriedNextRound) {
  MemoryStore store;
  CheckpointSync sync(&store, "p", dir_.string());
  Write(dir_ / "a.pt", "a");
  store.fail_puts = true;
  EXPECT_EQ(sync.Upload().status().code(), absl::StatusCode::kUnavailable);
  store.fail_puts = false;
  EXPECT_EQ(sync.Upload()->files, 1);
  EXPECT_EQ(store.objects.at("p/a.pt"), "a");
}

TEST_F(CheckpointSyncTest, RestoreDownloadsThePrefixAndRefusesUnsafeKeys) {
  MemoryStore store;
  store.objects = {{"ckpt/job-1/ps-0.json", "{}"},       {"ckpt/job-1/deep/er/model.pt", "m"},
                   {"ckpt/job-1/../escape", "x"},        {"ckpt/job-1/folder/", ""},
                   {"ckpt/job-10/other.pt", "not ours"}, {"ckpt/job-1//double", "y"}};
  CheckpointSync sync(&store, "ckpt/job-1", (dir_ / "restored").string());
  auto r = sync.Restore();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 2);
  EXPECT_EQ(r->skipped, 3);
  EXPECT_EQ(Slurp(dir_ / "restored" / "ps-0.json"), "{}");
  EXPECT_EQ(Slurp(dir_ / "restored" / "deep" / "er" / "model.pt"), "m");
  EXPECT_FALSE(fs::exists(dir_ / "escape"));
  EXPECT_FALSE(fs::exists(dir_ / "restored" / "other.pt"));
  // What was just restored is not uploaded again.
  EXPECT_EQ(sync.Upload()->files, 0);
  EXPECT_TRUE(store.puts.empty());
}

TEST_F(CheckpointSyncTest, RoundTripThroughTheFakeS3) {
  testing::FakeS3 s3("AKIDEXAMPLE", "secret-key-for-the-test");
  s3.CreateBucket("spotdnn-ckpt");
  S3Client::Options o;
  o.endpoint_url = s3.url();
  o.credentials = {.access_key_id = "AKIDEXAMPLE", .secret_access_key = "secret-key-for-the-test"};
  auto client = S3Client::Create(o);
  ASSERT_TRUE(client.ok());
  std::shared_ptr<S3Client> shared = std::move(*client);
  auto store = MakeS3ObjectStore(shared, "spotdnn-ckpt");
  s3.set_page_size(1);  // the restore follows continuation tokens
  {
    CheckpointSync writer(store.get(), "jobs/j1", (dir_ / "ps").string());
    Write(dir_ / "ps" / "ckpt-7.bin", std::string(100000, '\x07'));
    Write(dir_ / "ps" / "ps-0.json", R"({"step": 7, "file": "ckpt-7.bin"})");
    auto up = writer.Upload();
    ASSERT_TRUE(up.ok()) << up.status();
    EXPECT_EQ(up->files, 2);
    EXPECT_EQ(up->bytes, 100000 + 33);
  }
  EXPECT_EQ(s3.objects("spotdnn-ckpt").size(), 2u);
  CheckpointSync reader(store.get(), "jobs/j1", (dir_ / "takeover").string());
  auto down = reader.Restore();
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->files, 2);
  EXPECT_EQ(Slurp(dir_ / "takeover" / "ps-0.json"), R"({"step": 7, "file": "ckpt-7.bin"})");
  EXPECT_EQ(Slurp(dir_ / "takeover" / "ckpt-7.bin"), std::string(100000, '\x07'));
}

TEST_F(CheckpointSyncTest, RefusedCredentialsAreResolvedAgainOnce) {
  testing::FakeS3 s3("AKIDNEW", "the-new-secret");
  s3.CreateBucket("b1");
  S3Client::Options o;
  o.endpoint_url = s3.url();
  o.credentials = {.access_key_id = "AKIDOLD", .secret_access_key = "an-expired-secret"};
  int resolved = 0;
  auto store = MakeRefreshingS3ObjectStore(o, "b1", [&]() -> absl::StatusOr<AwsCredentials> {
    ++resolved;
    return AwsCredentials{.access_key_id = "AKIDNEW", .secret_access_key = "the-new-secret"};
  });
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Put("k", "v").ok());
  EXPECT_EQ(resolved, 1);
  EXPECT_EQ((*store)->Get("k").value(), "v");
  EXPECT_EQ(resolved, 1);  // the new ones are kept
  // Credentials that stay refused come back as the error, after one more try.
  auto stuck = MakeRefreshingS3ObjectStore(o, "b1", [&]() -> absl::StatusOr<AwsCredentials> {
    ++resolved;
    return AwsCredentials{.access_key_id = "AKIDOLD", .secret_access_key = "still-wrong"};
  });
  ASSERT_TRUE(stuck.ok());
  EXPECT_EQ((*stuck)->Put("k", "w").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(resolved, 2);
  EXPECT_EQ(s3.objects("b1").at("k"), "v");
}

TEST_F(CheckpointSyncTest, ACopyReRootsEveryFileOfThePrefixAndNothingElse) {
  MemoryStore east, west;
  east.objects = {{"jobs/j1/ckpt-7.bin", "seven"},
                  {"jobs/j1/manifest.json", "{\"step\": 7}"},
                  {"jobs/j1/.partial", "x"},
                  {"jobs/j1/ckpt-8.bin.tmp", "half"},
                  {"jobs/j10/ckpt-1.bin", "another job's"},
                  {"other/ckpt.bin", "not this job's"}};
  auto copied = CopyCheckpoint(east, "jobs/j1", west, "spotdnn/j1");
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->files, 2);
  EXPECT_EQ(copied->bytes, 5 + 11);
  EXPECT_EQ(copied->skipped, 2);  // the temporary files
  EXPECT_THAT(west.puts, ElementsAre("spotdnn/j1/ckpt-7.bin", "spotdnn/j1/manifest.json"));
  EXPECT_EQ(west.objects.at("spotdnn/j1/manifest.json"), "{\"step\": 7}");
  EXPECT_EQ(east.objects.size(), 6u);  // the source is left as it was
  // A failed write stops the copy, naming the object and the store.
  west.fail_puts = true;
  auto failed = CopyCheckpoint(east, "jobs/j1", west, "spotdnn/j1");
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr("writing mem://spotdnn/j1/ckpt-7.bin: store down"));
  // A missing object (deleted between the listing and the read) is named too.
  MemoryStore vanishing;
  class Lister final : public ObjectStore {
   public:
    absl::StatusOr<std::vector<StoredObject>> List(const std::string&) override {
      return std::vector<StoredObject>{{"p/gone.bin", 3}};
    }
    absl::StatusOr<std::string> Get(const std::string&) override {
      return absl::NotFoundError("no such key");
    }
    absl::Status Put(const std::string&, const std::string&) override { return absl::OkStatus(); }
    std::string Describe(const std::string& key) const override { return "s3://east/" + key; }
  } lister;
  auto gone = CopyCheckpoint(lister, "p", vanishing, "q");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()),
              ::testing::HasSubstr("reading s3://east/p/gone.bin"));
}

// The gateway's copier: from one region's bucket to another's through the S3 API (the fake's
// endpoint, the credentials from the environment), every file written once.
TEST_F(CheckpointSyncTest, TheS3CopierCopiesACheckpointToAnotherRegionsBucketOnce) {
  testing::FakeS3 s3("AKIDCOPY", "the-copy-secret");
  s3.CreateBucket("ckpt-us-east-1");
  s3.CreateBucket("ckpt-us-west-2");
  s3.PutDirect("ckpt-us-east-1", "spotdnn/j1/ckpt-7.bin", std::string(70000, '\x07'));
  s3.PutDirect("ckpt-us-east-1", "spotdnn/j1/ps-0.json", R"({"step": 7})");
  s3.PutDirect("ckpt-us-east-1", "spotdnn/j2/ckpt-1.bin", "not j1's");
  s3.set_page_size(1);  // the listing follows continuation tokens
  ::setenv("SPOTDNN_S3_ENDPOINT", s3.url().c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDCOPY", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "the-copy-secret", 1);
  ::unsetenv("AWS_SESSION_TOKEN");
  CheckpointCopier copy = MakeS3CheckpointCopier(ProviderSpec{.name = "aws"});
  ::unsetenv("SPOTDNN_S3_ENDPOINT");
  auto copied = copy("s3://ckpt-us-east-1/spotdnn/j1", "us-east-1",
                     "s3://ckpt-us-west-2/spotdnn/j1", "us-west-2");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->files, 2);
  EXPECT_EQ(copied->bytes, 70000 + 11);
  const auto west = s3.objects("ckpt-us-west-2");
  ASSERT_EQ(west.size(), 2u);
  EXPECT_EQ(west.at("spotdnn/j1/ckpt-7.bin"), std::string(70000, '\x07'));
  EXPECT_EQ(west.at("spotdnn/j1/ps-0.json"), R"({"step": 7})");
  int puts = 0;
  for (const std::string& r : s3.requests()) puts += r.rfind("PUT ", 0) == 0;
  EXPECT_EQ(puts, 2);
  // A URI that is not s3:// is refused naming the field.
  auto bad = copy("gs://elsewhere/j1", "", "s3://ckpt-us-west-2/spotdnn/j1", "us-west-2");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("checkpoint_uri"));
}

}  // namespace
}  // namespace spotdnn::launcher
