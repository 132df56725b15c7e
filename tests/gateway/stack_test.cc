// `spotdnn up --store postgres://…`: the profiler and detector of the local stack on an existing
// PostgreSQL database (a throwaway server the test starts) instead of their SQLite files; a store
// `up` cannot use is bad input naming --store and the value, and nothing is started.
#include "services/gateway/cli/stack.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/db/backends.h"
#include "base/db/database.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/ports.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class StackStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("spotdnn-stack-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    Cli({"down", "--data-dir", dir_.string()});
    fs::remove_all(dir_);
  }

  // Nothing was started: no stack.json, no service logs.
  void ExpectNothingStarted() {
    EXPECT_FALSE(fs::exists(dir_ / "stack.json"));
    EXPECT_FALSE(fs::exists(dir_ / "logs" / "spotdnn-predictor.log"));
  }

  fs::path dir_;
  const std::string bin_ = SPOTDNN_BINARY_DIR;
};

// The command line of a running process, one word per argument.
std::vector<std::string> CommandLine(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return absl::StrSplit(buffer.str(), '\0', absl::SkipEmpty());
}

TEST_F(StackStoreTest, AStoreUpCannotUseIsBadInputNamingTheFlagAndTheValue) {
  const struct {
    std::string store;
    std::string says;
  } cases[] = {
      {"mysql://db/spotdnn", "unknown scheme"},
      // SQLite: one file cannot be both services' store.
      {"sqlite:/tmp/shared.db", "PostgreSQL"},
      {"/tmp/shared.db", "PostgreSQL"},
  };
  for (const auto& c : cases) {
    CliRun up = Cli({"up", "--store", c.store, "--data-dir", dir_.string(), "--bin-dir", bin_});
    EXPECT_EQ(up.code, kExitBadInput) << c.store << ": " << up.err;
    EXPECT_THAT(up.err, HasSubstr(absl::StrCat("--store = \"", c.store, "\"")));
    EXPECT_THAT(up.err, HasSubstr(c.says)) << c.store;
    ExpectNothingStarted();
  }
  // A password in the URI is refused, and not repeated.
  CliRun secret = Cli({"up", "--store", "postgres://me:hunter2@db/spotdnn", "--data-dir",
                       dir_.string(), "--bin-dir", bin_});
  EXPECT_EQ(secret.code, kExitBadInput) << secret.err;
  EXPECT_THAT(secret.err, HasSubstr("--store = \"postgres://me:***@db/spotdnn\""));
  EXPECT_THAT(secret.err, Not(HasSubstr("hunter2")));
  CliRun empty = Cli({"up", "--store", "", "--data-dir", dir_.string(), "--bin-dir", bin_});
  EXPECT_EQ(empty.code, kExitBadInput) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("--store = \"\""));
  ExpectNothingStarted();
}

// `up` starts no database: one that does not answer is an error naming --store and the URI, before
// any service starts.
TEST_F(StackStoreTest, ADatabaseThatDoesNotAnswerStartsNothing) {
  const int port = testing_util::FreeLoopbackPort();
  const std::string uri = absl::StrCat("postgres://spotdnn@127.0.0.1:", port, "/spotdnn");
  CliRun up = Cli({"up", "--store", uri, "--data-dir", dir_.string(), "--bin-dir", bin_});
  EXPECT_EQ(up.code, kExitFailure) << up.err;
  EXPECT_THAT(up.err, HasSubstr(absl::StrCat("--store = \"", uri, "\"")));
  ExpectNothingStarted();
}

TEST_F(StackStoreTest, TheProfilerAndDetectorUseTheExistingDatabase) {
  absl::StatusOr<testing_util::PostgresServer*> server = testing_util::SharedPostgresServer();
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::string> uri = (*server)->CreateDatabase();
  ASSERT_TRUE(uri.ok()) << uri.status();

  CliRun up =
      Cli({"up", "--store", *uri, "--data-dir", dir_.string(), "--bin-dir", bin_, "--json"});
  ASSERT_EQ(up.code, kExitOk) << up.err;
  const nlohmann::json out = nlohmann::json::parse(up.out);
  EXPECT_EQ(out["store"], *uri);
  absl::StatusOr<Stack> stack = ReadStack(dir_.string());
  ASSERT_TRUE(stack.ok()) << stack.status();
  EXPECT_EQ(stack->store, *uri) << "stack.json should record the store";

  // Their command lines name the store (the detector with a replica id of its own), not a file.
  const std::vector<std::string> profiler = CommandLine(stack->pids["spotdnn-profiler"]);
  const std::vector<std::string> detector = CommandLine(stack->pids["spotdnn-detector"]);
  EXPECT_THAT(profiler, ::testing::Contains("--store=" + *uri));
  EXPECT_THAT(detector, ::testing::Contains("--store=" + *uri));
  EXPECT_THAT(detector,
              ::testing::Contains("--replica_id=" + StackReplicaId(fs::absolute(dir_).string())));
  for (const auto& argv : {profiler, detector}) {
    EXPECT_THAT(argv, Not(::testing::Contains(::testing::StartsWith("--db="))));
  }
  EXPECT_FALSE(fs::exists(dir_ / "profiles.db"));
  EXPECT_FALSE(fs::exists(dir_ / "detector.db"));

  // Both opened their stores there: their schemas exist in the database.
  absl::StatusOr<std::unique_ptr<db::Database>> database =
      db::OpenPostgres(*uri, "test database", "public");
  ASSERT_TRUE(database.ok()) << database.status();
  absl::StatusOr<std::vector<db::Row>> schemas = (*database)->QueryAll(
      "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'spotdnn%' "
      "ORDER BY schema_name");
  ASSERT_TRUE(schemas.ok()) << schemas.status();
  std::vector<std::string> names;
  for (const db::Row& row : *schemas) names.push_back(row.Text(0));
  EXPECT_THAT(names, ::testing::IsSupersetOf({"spotdnn_detector", "spotdnn_profiler"}));

  // Up again on the same store: the same stack. On another one: stop it first.
  CliRun again = Cli({"up", "--store", *uri, "--data-dir", dir_.string(), "--bin-dir", bin_});
  EXPECT_EQ(again.code, kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr("Store: " + *uri));
  EXPECT_EQ(ReadStack(dir_.string())->pids, stack->pids);
  const std::string other = absl::StrCat("postgres://spotdnn@127.0.0.1:", (*server)->port(), "/x");
  CliRun elsewhere = Cli({"up", "--store", other, "--data-dir", dir_.string(), "--bin-dir", bin_});
  EXPECT_EQ(elsewhere.code, kExitBadInput) << elsewhere.err;
  EXPECT_THAT(elsewhere.err, HasSubstr(absl::StrCat("--store = \"", other, "\"")));
  EXPECT_THAT(elsewhere.err, HasSubstr("already up on \"" + *uri + "\""));

  CliRun down = Cli({"down", "--data-dir", dir_.string()});
  EXPECT_EQ(down.code, kExitOk) << down.err;
}

}  // namespace
}  // namespace spotdnn::gateway
