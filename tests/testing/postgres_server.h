// A throwaway PostgreSQL server for tests: the Debian binaries (initdb, postgres) run in a
// temporary folder on a free 127.0.0.1 port (unix sockets in the folder too), as `nobody` when the
// test runs as root, and are stopped (the folder removed) afterwards. One per test binary
// (SharedPostgresServer), a fresh database per test (CreateDatabase), and Stop()/Start() for tests
// of a database that goes away and comes back.
#ifndef SPOTDNN_TESTS_TESTING_POSTGRES_SERVER_H_
#define SPOTDNN_TESTS_TESTING_POSTGRES_SERVER_H_

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace spotdnn::testing_util {

class PostgresServer {
 public:
  // Makes a cluster (initdb) in a new temporary folder and starts it. FAILED_PRECONDITION naming
  // the folder when the PostgreSQL binaries are missing (deploy/setup.sh installs them), INTERNAL
  // with the server's log when it does not start.
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Create();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Stops the server (a fast shutdown), keeping its data.
  absl::Status Stop();
  // Starts it again on the same port. Call it from a thread that outlives the server (the
  // server is told to quit when the thread that started it ends).
  absl::Status Start();

  int port() const { return port_; }
  // A new empty database; its libpq URI (no password: the server trusts loopback connections).
  absl::StatusOr<std::string> CreateDatabase();

 private:
  PostgresServer(std::string dir, std::string bin, uid_t uid, gid_t gid)
      : dir_(std::move(dir)), bin_(std::move(bin)), uid_(uid), gid_(gid) {}
  // Starts the server on `port` and waits until it accepts connections.
  absl::Status StartOn(int port);
  std::string LogTail() const;

  std::string dir_;  // the temporary folder: data/, the sockets, server.log
  std::string bin_;  // where initdb and postgres are
  uid_t uid_;
  gid_t gid_;
  int port_ = 0;
  pid_t pid_ = -1;
  int databases_ = 0;
};

// The test binary's server, started on first use and stopped when the tests end.
absl::StatusOr<PostgresServer*> SharedPostgresServer();

// The backends a store test runs on.
enum class StoreBackend { kSqlite, kPostgres };
// "sqlite" or "postgres": the suffix of a parameterized test's name.
std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info);
// A spec for a fresh store of `backend`: `sqlite_path` itself, or a new database on the shared
// server.
absl::StatusOr<std::string> FreshStoreSpec(StoreBackend backend, const std::string& sqlite_path);

// A test run on each backend: a new temporary folder (dir_, removed afterwards) and a fresh store
// (spec_: dir_/store.db, or a new database on the shared server) per test.
class StoreBackendTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::filesystem::path dir_;
  std::string spec_;
};

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_POSTGRES_SERVER_H_
