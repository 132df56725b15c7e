// Database::TryHoldLock on both backends: one session at a time holds a named lock, a second is
// refused and told who holds it, and the lock comes free when the holder lets go, its process is
// killed with kill -9, or (PostgreSQL) its connection is cut.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/db/database.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::db {
namespace {

using ::testing::HasSubstr;
using testing_util::StoreBackend;

// Tries to take `name` through `db` until it is granted or `patience` has passed: a server
// notices a dead client's connection soon, but not synchronously.
std::unique_ptr<HeldLock> HoldWithin(Database& db, const std::string& name,
                                     std::chrono::seconds patience) {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (true) {
    absl::StatusOr<LockAttempt> attempt = db.TryHoldLock(name, "waiter");
    EXPECT_TRUE(attempt.ok()) << attempt.status();
    if (!attempt.ok()) return nullptr;
    if (attempt->lock != nullptr || std::chrono::steady_clock::now() > give_up) {
      return std::move(attempt->lock);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

class DatabaseLockTest : public testing_util::StoreBackendTest {
 protected:
  // A session of its own (another gateway, as far as the lock goes).
  std::unique_ptr<Database> Open(const std::string& name = "lock_store") {
    auto db = OpenStore(spec_, "--store", name, {});
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }
};

TEST_P(DatabaseLockTest, ASecondSessionIsRefusedAndToldWhoHoldsItUntilTheHolderLetsGo) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a && b);
  auto held = a->TryHoldLock("job/x", "pid 1 on host-a");
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(held->lock, nullptr);
  EXPECT_TRUE(held->lock->Check().ok());

  auto refused = b->TryHoldLock("job/x", "pid 2 on host-b");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->lock, nullptr);
  EXPECT_EQ(refused->holder, "pid 1 on host-a");
  // The holder itself is refused a second hold too: one run per job, even in one process.
  auto again = a->TryHoldLock("job/x", "pid 1 on host-a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->lock, nullptr);

  // Another name is another lock.
  auto other = b->TryHoldLock("job/y", "pid 2 on host-b");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->lock, nullptr);

  held->lock.reset();
  auto taken = b->TryHoldLock("job/x", "pid 2 on host-b");
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_NE(taken->lock, nullptr);
}

// The holder is a process that dies by kill -9 without letting go: the lock comes free (the
// kernel closes its lock file, or the server its session) and another session takes it.
TEST_P(DatabaseLockTest, AHolderKilledWithSigkillReleasesTheLock) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    auto db = OpenStore(spec_, "--store", "lock_store", {});
    if (!db.ok()) _exit(2);
    auto held = (*db)->TryHoldLock("job/killed", "the child");
    if (!held.ok() || held->lock == nullptr) _exit(3);
    if (write(ready[1], "1", 1) != 1) _exit(4);
    while (true) pause();
  }
  close(ready[1]);
  char byte = 0;
  const ssize_t n = read(ready[0], &byte, 1);
  close(ready[0]);
  if (n != 1) {
    int status = 0;
    waitpid(child, &status, 0);
    FAIL() << "the child did not take the lock (exit status " << WEXITSTATUS(status) << ")";
  }
  auto db = Open();
  ASSERT_NE(db, nullptr);
  auto refused = db->TryHoldLock("job/killed", "the parent");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->lock, nullptr);
  EXPECT_EQ(refused->holder, "the child");

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_NE(HoldWithin(*db, "job/killed", std::chrono::seconds(30)), nullptr)
      << "the dead holder's lock was never released";
}

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseLockTest,
                         ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgres),
                         testing_util::StoreBackendName);

// SQLite: the lock is a file beside the database; a name cannot lead it out of its folder.
TEST(SqliteLockTest, TheLockFileLiesBesideTheDatabaseAndNamesTheHolder) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("spotdnn-dblock-file-", getpid());
  std::filesystem::remove_all(dir);
  auto db = OpenStore((dir / "jobs.db").string(), "--store", "jobs", {});
  ASSERT_TRUE(db.ok()) << db.status();
  auto held = (*db)->TryHoldLock("../job/x", "pid 7 on here");
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NE(held->lock, nullptr);
  const std::filesystem::path file = dir / "jobs.db.locks" / "%2E.%2Fjob%2Fx.lock";
  ASSERT_TRUE(std::filesystem::exists(file));
  std::string text;
  std::getline(std::ifstream(file), text);
  EXPECT_EQ(text, "pid 7 on here");
  std::filesystem::remove_all(dir);
}

TEST(SqliteLockTest, APrivateInMemoryDatabaseAlwaysGrantsIt) {
  auto db = OpenStore(":memory:", "--store", "mem", {});
  ASSERT_TRUE(db.ok()) << db.status();
  auto first = (*db)->TryHoldLock("x", "one");
  auto second = (*db)->TryHoldLock("x", "two");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->lock, nullptr);
  EXPECT_NE(second->lock, nullptr);
}

class PostgresLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing_util::SharedPostgresServer();
    ASSERT_TRUE(server.ok()) << server.status();
    auto uri = (*server)->CreateDatabase();
    ASSERT_TRUE(uri.ok()) << uri.status();
    uri_ = *uri;
  }
  std::unique_ptr<Database> Open(const std::string& name) {
    auto db = OpenStore(uri_, "--store", name, {});
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }
  std::string uri_;
};

// The holder's connection is cut (its host gone, the server restarted): the server drops the
// lock, another session takes it, and the old holder's Check says it is lost.
TEST_F(PostgresLockTest, AHolderWhoseConnectionIsCutLosesTheLock) {
  auto a = Open("jobs"), b = Open("jobs"), admin = Open("admin");
  ASSERT_TRUE(a && b && admin);
  auto held = a->TryHoldLock("job/cut", "gateway-a");
  ASSERT_TRUE(held.ok() && held->lock != nullptr) << held.status();
  auto cut = admin->QueryAll(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
      "'gateway-a'");
  ASSERT_TRUE(cut.ok()) << cut.status();
  ASSERT_EQ(cut->size(), 1u);
  EXPECT_NE(HoldWithin(*b, "job/cut", std::chrono::seconds(30)), nullptr);
  const absl::Status lost = held->lock->Check();
  EXPECT_TRUE(absl::IsUnavailable(lost)) << lost;
  EXPECT_THAT(lost.message(), HasSubstr("lock \"job/cut\""));
}

// Stores sharing one database have their own locks: the same name in two stores is two locks.
TEST_F(PostgresLockTest, StoresSharingADatabaseHaveTheirOwnLocks) {
  auto jobs = Open("jobs"), other = Open("other");
  ASSERT_TRUE(jobs && other);
  auto a = jobs->TryHoldLock("x", "a");
  auto b = other->TryHoldLock("x", "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->lock, nullptr);
  EXPECT_NE(b->lock, nullptr);
}

// A server that cannot be reached: UNAVAILABLE naming the lock, not a refusal.
TEST_F(PostgresLockTest, AnUnreachableServerIsUnavailableNotARefusal) {
  auto db = Open("jobs");
  ASSERT_NE(db, nullptr);
  auto server = testing_util::SharedPostgresServer();
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Stop().ok());
  auto attempt = db->TryHoldLock("job/down", "a");
  ASSERT_TRUE((*server)->Start().ok());
  EXPECT_TRUE(absl::IsUnavailable(attempt.status())) << attempt.status();
  EXPECT_THAT(attempt.status().message(), HasSubstr("lock \"job/down\""));
}

}  // namespace
}  // namespace spotdnn::db
