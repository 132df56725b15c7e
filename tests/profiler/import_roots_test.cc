// What a profiler server may read for an import: paths under its roots only, no "..", no symbolic
// links below a root, regular files only, and a cap on bytes.
#include "profiler/import_roots.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class ImportRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("spotdnn-roots-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ / "root";
    fs::create_directories(root_ / "runs" / "r1worker2");
    Write(root_ / "runs" / "r1worker2" / "log.csv", kLog);
    // A secret beside the root, and links to it (and to /proc, /dev) inside.
    Write(base_ / "secret.csv", "Wall time,Step,Value\nroot:$6$hash-of-a-secret,1,1\n");
    fs::create_symlink(base_ / "secret.csv", root_ / "link.csv");
    fs::create_symlink(base_, root_ / "linked-dir");
    fs::create_symlink("/proc/self/environ", root_ / "environ.log");
    fs::create_symlink("/dev/zero", root_ / "zero.log");
    auto roots = ImportRoots::Create({root_.string()});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *std::move(roots);
  }
  void TearDown() override { fs::remove_all(base_); }

  static void Write(const fs::path& path, const std::string& content) {
    std::ofstream(path, std::ios::binary) << content;
  }

  // The server's way in: resolve under the roots, then read without following links.
  absl::StatusOr<ImportResult> Import(const std::string& path, std::uint64_t max_bytes = 1 << 20) {
    auto resolved = roots_.Resolve(path);
    if (!resolved.ok()) return resolved.status();
    ImportOptions options;
    options.job_id = "j";
    FileAccess access;
    access.follow_symlinks = false;
    access.max_bytes = max_bytes;
    return ImportPath(*resolved, options, access);
  }

  static constexpr char kLog[] =
      "Wall time,Step,Value\n1568069781.1,101,8.5\n1568069791.1,201,8.6\n";
  fs::path base_, root_;
  ImportRoots roots_;
};

TEST_F(ImportRootsTest, ReadsFilesAndFoldersUnderTheRoot) {
  auto file = Import((root_ / "runs" / "r1worker2" / "log.csv").string());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->samples.size(), 2u);
  EXPECT_EQ(file->samples[0].cluster_workers, 2);
  // A folder: the regular log files under it; the links in it are not followed.
  auto folder = Import(root_.string());
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->files, 1);
  EXPECT_EQ(folder->samples.size(), 2u);
  EXPECT_EQ(folder->samples[0].job_id, "j/runs/r1worker2");
}

// The vm_data.csv beside a checkpoint export is read as the logs are: not through a link, and
// from the import's byte budget.
TEST_F(ImportRootsTest, ReadsTheVmListBesideALogAsItReadsLogs) {
  const fs::path runs = root_ / "export";
  fs::create_directories(runs);
  Write(runs / "train_data.csv",
        "Wall Time,Step,Accuracy,Run\n1000,0,0.1,1\n1100,4000,0.5,1\n2000,0,0.1,2\n"
        "2100,4000,0.5,2\n");
  // Outside the root, a list that would leave run 1 out; linked in as vm_data.csv.
  Write(base_ / "vm_data.csv", "VM_name,Uptime,Revoked\nx-run1-worker-1,10,Revoked\n");
  fs::create_symlink(base_ / "vm_data.csv", runs / "vm_data.csv");
  auto jobs_of = [](const ImportResult& r) {
    std::set<std::string> jobs;
    for (const Sample& s : r.samples) jobs.insert(s.job_id);
    return jobs;
  };
  auto linked = Import((runs / "train_data.csv").string());
  ASSERT_TRUE(linked.ok()) << linked.status();
  EXPECT_EQ(jobs_of(*linked), (std::set<std::string>{"j/run-1", "j/run-2"}));
  auto folder = Import(runs.string());
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(jobs_of(*folder), (std::set<std::string>{"j/run-1", "j/run-2"}));
  EXPECT_EQ(folder->files, 1);  // the link is not a file of the folder either
  // The same list as a regular file beside the log is read.
  fs::remove(runs / "vm_data.csv");
  Write(runs / "vm_data.csv", "VM_name,Uptime,Revoked\nx-run1-worker-1,10,Revoked\n");
  auto listed = Import((runs / "train_data.csv").string());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(jobs_of(*listed), (std::set<std::string>{"j/run-2"}));
  // And counts against the budget: a list bigger than it is refused.
  Write(runs / "vm_data.csv", "VM_name,Uptime,Revoked\n" + std::string(4096, '#') + "\n");
  auto big = Import((runs / "train_data.csv").string(), 1024);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("vm_data.csv"));
  EXPECT_THAT(big.status().message(), HasSubstr("import limit"));
}

TEST_F(ImportRootsTest, RefusesPathsOutsideTheRoots) {
  for (const std::string& path :
       {(base_ / "secret.csv").string(), std::string("/etc/shadow"),
        std::string("/proc/self/environ"), std::string("/dev/zero"), std::string("/")}) {
    auto result = Import(path);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(result.status().message(), HasSubstr("outside the server's import roots")) << path;
  }
  // ".." is refused even when it would stay inside, and relative paths are.
  for (const std::string& path :
       {(root_ / ".." / "secret.csv").string(), (root_ / "runs" / ".." / "runs").string(),
        std::string("secret.csv"), (root_ / "." / "runs").string()}) {
    auto result = Import(path);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << path;
  }
  EXPECT_EQ(Import((root_ / "nope.csv").string()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ImportRootsTest, RefusesSymbolicLinksBelowTheRootWithoutTheirContent) {
  for (const char* link : {"link.csv", "environ.log", "zero.log", "linked-dir/secret.csv"}) {
    auto result = Import((root_ / link).string());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied) << link;
    EXPECT_THAT(result.status().message(), HasSubstr("symbolic link")) << link;
    EXPECT_THAT(result.status().message(), Not(HasSubstr("hash-of-a-secret"))) << link;
  }
}

TEST_F(ImportRootsTest, ReadsRegularFilesOnlyAndCapsTheirSize) {
  ASSERT_EQ(mkfifo((root_ / "fifo.log").c_str(), 0600), 0);
  auto fifo = Import((root_ / "fifo.log").string());  // must not block on the FIFO
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(fifo.status().message(), HasSubstr("not a regular file"));

  auto capped = Import((root_ / "runs" / "r1worker2" / "log.csv").string(), /*max_bytes=*/20);
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(capped.status().message(), HasSubstr("above what is left of the import limit"));
}

TEST_F(ImportRootsTest, LinksAreNotFollowedEvenIfSwappedInAfterTheCheck) {
  // The check passed for a real file; a link put in its place before it is opened is not read.
  const fs::path file = root_ / "swap.csv";
  Write(file, kLog);
  auto resolved = roots_.Resolve(file.string());
  ASSERT_TRUE(resolved.ok());
  fs::remove(file);
  fs::create_symlink(base_ / "secret.csv", file);
  FileAccess access;
  access.follow_symlinks = false;
  auto result = ImportPath(*resolved, {}, access);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(result.status().message(), Not(HasSubstr("hash-of-a-secret")));
}

TEST_F(ImportRootsTest, NoRootsRefuseEveryPath) {
  const ImportRoots none;
  auto result = none.Resolve((root_ / "runs").string());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(result.status().message(), HasSubstr("no --import_root"));
}

TEST_F(ImportRootsTest, RootsMustBeAbsoluteExistingNonSystemFolders) {
  for (const std::string& root :
       {std::string("relative/dir"), (base_ / "missing").string(), (base_ / "secret.csv").string(),
        std::string("/"), std::string("/proc"), std::string("/dev"), std::string("/sys/kernel")}) {
    auto roots = ImportRoots::Create({root});
    EXPECT_EQ(roots.status().code(), absl::StatusCode::kInvalidArgument) << root;
    EXPECT_THAT(roots.status().message(), HasSubstr("--import_root")) << root;
  }
  // A root given through a link is resolved once; paths under either spelling work.
  fs::create_symlink(root_, base_ / "alias");
  auto roots = ImportRoots::Create({(base_ / "alias").string()});
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_TRUE(roots->Resolve((base_ / "alias" / "runs").string()).ok());
  EXPECT_TRUE(roots->Resolve((root_ / "runs").string()).ok());
}

}  // namespace
}  // namespace spotdnn::profiler

namespace spotdnn::profiler {
namespace {

TEST(ImportRootsSpelling, ARootWithATrailingSlashHoldsWhatIsUnderIt) {
  const fs::path base =
      fs::temp_directory_path() / ("spotdnn-roots-slash-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base / "logs" / "run");
  fs::create_directories(base / "logsX");
  auto roots = ImportRoots::Create({(base / "logs").string() + "/"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  auto resolved = roots->Resolve((base / "logs" / "run").string());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, fs::canonical(base / "logs" / "run").string());
  EXPECT_TRUE(roots->Resolve((base / "logs").string()).ok());
  // A sibling whose name starts like the root is not under it.
  EXPECT_EQ(roots->Resolve((base / "logsX").string()).status().code(),
            absl::StatusCode::kPermissionDenied);
  fs::remove_all(base);
}

}  // namespace
}  // namespace spotdnn::profiler
