// The database layer (base/db) on both backends: store specs, values, errors by kind,
// transactions, the dialect, migrations, and (on PostgreSQL) two openers at once and a server
// that goes away and comes back.
#include "base/db/database.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <future>
#include <limits>
#include <thread>

#include "base/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/metrics_sample.h"
#include "tests/testing/ports.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::db {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::StoreBackend;

TEST(StoreSpecTest, PathsAndSqliteSpecsAreSqlite) {
  auto plain = ParseStoreSpec("/var/lib/spotdnn/profiles.db", "--store");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->backend, Backend::kSqlite);
  EXPECT_EQ(plain->target, "/var/lib/spotdnn/profiles.db");
  auto prefixed = ParseStoreSpec("sqlite:rel/x.db", "--store");
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(prefixed->backend, Backend::kSqlite);
  EXPECT_EQ(prefixed->target, "rel/x.db");
}

TEST(StoreSpecTest, PostgresUrisArePostgres) {
  for (const char* uri : {"postgres://db.internal/spotdnn",
                          "postgresql://spotdnn@db.internal:5433/spotdnn?sslmode=require",
                          "postgresql:///spotdnn?host=/run/postgresql"}) {
    auto spec = ParseStoreSpec(uri, "--store");
    ASSERT_TRUE(spec.ok()) << uri << ": " << spec.status();
    EXPECT_EQ(spec->backend, Backend::kPostgres);
    EXPECT_EQ(spec->target, uri);
  }
}

TEST(StoreSpecTest, BadSpecsNameTheFlagAndTheValue) {
  for (const char* bad : {"", "sqlite:", "mysql://db/x"}) {
    auto spec = ParseStoreSpec(bad, "--store");
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr(absl::StrCat("--store = \"", bad, "\"")));
  }
  EXPECT_THAT(ParseStoreSpec("mysql://db/x", "--db").status().message(), HasSubstr("mysql"));
}

TEST(StoreSpecTest, APasswordInTheUriIsRefusedAndNotRepeated) {
  for (const char* uri : {"postgres://spotdnn:s3cret@db/spotdnn",
                          "postgresql://db/spotdnn?sslmode=require&password=s3cret"}) {
    auto spec = ParseStoreSpec(uri, "--store");
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << uri;
    EXPECT_THAT(spec.status().message(), HasSubstr("--store"));
    EXPECT_THAT(spec.status().message(), HasSubstr("PGPASSFILE"));
    EXPECT_THAT(spec.status().message(), HasSubstr("***"));
    EXPECT_THAT(spec.status().message(), Not(HasSubstr("s3cret")));
  }
}

TEST(RetryTest, RetriesOnlyRetryableErrorsUpToTheLimit) {
  const RetryPolicy policy{.max_attempts = 4, .initial_backoff = absl::Milliseconds(1)};
  int tries = 0, recovered = 0;
  absl::Status s = Retry(
      policy, [&] { return ++tries < 3 ? absl::UnavailableError("down") : absl::OkStatus(); },
      [&] { ++recovered; });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(tries, 3);
  EXPECT_EQ(recovered, 2);
  tries = 0;
  s = Retry(policy, [&] { return ++tries, absl::AbortedError("deadlock"); });
  EXPECT_TRUE(absl::IsAborted(s));
  EXPECT_EQ(tries, 4);
  tries = 0;
  s = Retry(policy, [&] { return ++tries, absl::InvalidArgumentError("bad"); });
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(tries, 1);
}

class DatabaseTest : public testing_util::StoreBackendTest {
 protected:
  std::unique_ptr<Database> Open(absl::Span<const Migration> migrations = {}) {
    auto db = OpenStore(spec_, "--store", "test_store", migrations);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }
};

TEST_P(DatabaseTest, ValuesRoundTrip) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->ExecDdl("CREATE TABLE v (i INTEGER, r REAL, t TEXT, n TEXT)").ok());
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const double tricky = 0.1 + 0.2;
  const std::string text = "it's \"quoted\" ? $1 ünïcode";
  auto inserted =
      db->Exec("INSERT INTO v (i, r, t, n) VALUES (?1, ?2, ?3, ?4)", {big, tricky, text, nullptr});
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(*inserted, 1);
  auto row = db->QueryOne("SELECT i, r, t, n FROM v WHERE t = ?1", {text});
  ASSERT_TRUE(row.ok()) << row.status();
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->Int(0), big);
  EXPECT_EQ((*row)->Real(1), tricky);  // exactly: no digits lost on the way
  EXPECT_EQ((*row)->Text(2), text);
  EXPECT_TRUE((*row)->IsNull(3));
  EXPECT_FALSE((*row)->IsNull(0));
  auto none = db->QueryOne("SELECT i FROM v WHERE t = ?1", {std::string("absent")});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST_P(DatabaseTest, ErrorsMapToCodesByKind) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(
      db->ExecDdl("CREATE TABLE k (name TEXT PRIMARY KEY, n INTEGER NOT NULL CHECK (n >= 0))")
          .ok());
  ASSERT_TRUE(db->Exec("INSERT INTO k (name, n) VALUES (?1, ?2)", {std::string("a"), 1}).ok());
  const auto errors = [](const std::string& code) {
    return std::max(0.0,
                    testing_util::SampleSum(
                        metrics::DefaultRegistry().Render(),
                        "spotdnn_store_errors_total{store=\"test_store\",code=\"" + code + "\"}"));
  };
  const double already_exists = errors("ALREADY_EXISTS");
  const double invalid_argument = errors("INVALID_ARGUMENT");
  const double internal = errors("INTERNAL");
  auto duplicate = db->Exec("INSERT INTO k (name, n) VALUES (?1, ?2)", {std::string("a"), 2});
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kAlreadyExists) << duplicate.status();
  auto negative = db->Exec("INSERT INTO k (name, n) VALUES (?1, ?2)", {std::string("b"), -1});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument) << negative.status();
  auto missing = db->Exec("INSERT INTO k (name) VALUES (?1)", {std::string("c")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << missing.status();
  auto syntax = db->QueryAll("SELEKT 1");
  EXPECT_EQ(syntax.status().code(), absl::StatusCode::kInternal) << syntax.status();
  EXPECT_FALSE(IsRetryable(syntax.status()));
  EXPECT_THAT(syntax.status().message(), HasSubstr("SELEKT"));
  // Each failure counted once, by store and code (none of them is retried).
  EXPECT_EQ(errors("ALREADY_EXISTS"), already_exists + 1);
  EXPECT_EQ(errors("INVALID_ARGUMENT"), invalid_argument + 2);
  EXPECT_EQ(errors("INTERNAL"), internal + 1);
}

TEST_P(DatabaseTest, AWriteIsAllOrNothing) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->ExecDdl("CREATE TABLE t (x INTEGER)").ok());
  absl::Status failed = db->Write([&]() -> absl::Status {
    if (auto s = db->Exec("INSERT INTO t (x) VALUES (1)"); !s.ok()) return s.status();
    return absl::InvalidArgumentError("changed my mind");
  });
  EXPECT_TRUE(absl::IsInvalidArgument(failed));
  ASSERT_TRUE(db->Write([&] { return db->Exec("INSERT INTO t (x) VALUES (2)").status(); }).ok());
  auto rows = db->QueryAll("SELECT x FROM t");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].Int(0), 2);
}

TEST_P(DatabaseTest, TheDialectKeepsInsertionOrderAndBytewiseText) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->ExecDdl("CREATE TABLE o (k TEXT PRIMARY KEY, v INTEGER{ROWID});"
                          "CREATE TABLE a (id INTEGER PRIMARY KEY AUTOINCREMENT, b BLOB)")
                  .ok());
  for (const char* k : {"a0", "B", "a/", "a"}) {
    ASSERT_TRUE(
        db->Exec("INSERT INTO o (k, v) VALUES (?1, 1) ON CONFLICT DO NOTHING", {std::string(k)})
            .ok());
  }
  // An upsert keeps the row's place.
  ASSERT_TRUE(db->Exec("INSERT INTO o (k, v) VALUES ('a0', 2) ON CONFLICT (k) DO UPDATE SET v = "
                       "excluded.v")
                  .ok());
  auto inserted = db->QueryAll("SELECT k, v FROM o ORDER BY rowid");
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  ASSERT_EQ(inserted->size(), 4u);
  EXPECT_EQ((*inserted)[0].Text(0), "a0");
  EXPECT_EQ((*inserted)[0].Int(1), 2);
  EXPECT_EQ((*inserted)[3].Text(0), "a");
  auto sorted = db->QueryAll("SELECT k FROM o ORDER BY k");
  ASSERT_TRUE(sorted.ok());
  std::vector<std::string> keys;
  for (const Row& r : *sorted) keys.push_back(r.Text(0));
  EXPECT_EQ(keys, (std::vector<std::string>{"B", "a", "a/", "a0"}));
  ASSERT_TRUE(db->Exec("INSERT INTO a (b) VALUES (NULL)").ok());
  ASSERT_TRUE(db->Exec("INSERT INTO a (b) VALUES (NULL)").ok());
  auto ids = db->QueryAll("SELECT id FROM a ORDER BY id");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_LT((*ids)[0].Int(0), (*ids)[1].Int(0));
}

TEST_P(DatabaseTest, MigrationsRunOnceInOrderAndANewerSchemaIsRefused) {
  int applied_v2 = 0;
  const Migration v1{
      1, [](Database& db) { return db.ExecDdl("CREATE TABLE IF NOT EXISTS m (a TEXT)"); }};
  const Migration v2{2, [&](Database& db) {
                       ++applied_v2;
                       return db.AddColumnIfMissing("m", "b", "INTEGER NOT NULL DEFAULT 7");
                     }};
  {
    auto db = Open({v1});
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(*SchemaVersion(*db), 1);
    ASSERT_TRUE(db->Exec("INSERT INTO m (a) VALUES ('kept')").ok());
  }
  for (int i = 0; i < 2; ++i) {
    auto db = Open({v1, v2});
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(*SchemaVersion(*db), 2);
    auto row = db->QueryOne("SELECT a, b FROM m");
    ASSERT_TRUE(row.ok()) << row.status();
    ASSERT_TRUE(row->has_value());
    EXPECT_EQ((*row)->Text(0), "kept");
    EXPECT_EQ((*row)->Int(1), 7);
  }
  EXPECT_EQ(applied_v2, 1);
  auto older = OpenStore(spec_, "--store", "test_store", std::vector<Migration>{v1});
  EXPECT_EQ(older.status().code(), absl::StatusCode::kFailedPrecondition) << older.status();
  EXPECT_THAT(older.status().message(), HasSubstr("--store"));
  EXPECT_THAT(older.status().message(), HasSubstr("schema version 2"));
}

// A database an earlier release made (its tables, no recorded version) gets version 1, which
// adds what it lacks and keeps its rows.
TEST_P(DatabaseTest, AnUnversionedSchemaIsMigrated) {
  {
    auto db = Open();
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(
        db->ExecDdl("CREATE TABLE legacy (a TEXT); INSERT INTO legacy VALUES ('old')").ok());
    EXPECT_EQ(*SchemaVersion(*db), 0);
  }
  const Migration v1{1, [](Database& db) {
                       if (auto s = db.ExecDdl("CREATE TABLE IF NOT EXISTS legacy (a TEXT, b "
                                               "TEXT NOT NULL DEFAULT 'x')");
                           !s.ok()) {
                         return s;
                       }
                       return db.AddColumnIfMissing("legacy", "b", "TEXT NOT NULL DEFAULT 'x'");
                     }};
  auto db = Open({v1});
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(*SchemaVersion(*db), 1);
  auto columns = db->Columns("legacy");
  ASSERT_TRUE(columns.ok());
  EXPECT_EQ(*columns, (std::set<std::string>{"a", "b"}));
  auto row = db->QueryOne("SELECT a, b FROM legacy");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->Text(0), "old");
  EXPECT_EQ((*row)->Text(1), "x");
}

// Many rows in one statement: ValuesRows numbers the parameters row after row.
TEST_P(DatabaseTest, AMultiRowInsertStoresEveryRowInOrder) {
  auto db = Open();
  ASSERT_TRUE(db->ExecDdl("CREATE TABLE m (a INTEGER, b TEXT{ROWID})").ok());
  EXPECT_EQ(ValuesRows(2, 3), "(?1, ?2), (?3, ?4), (?5, ?6)");
  std::vector<Value> params;
  for (std::int64_t i = 0; i < 3; ++i) {
    params.emplace_back(i);
    params.emplace_back(absl::StrCat("row ", i));
  }
  auto inserted = db->Exec(absl::StrCat("INSERT INTO m (a, b) VALUES ", ValuesRows(2, 3)), params);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(*inserted, 3);
  auto rows = db->QueryAll("SELECT a, b FROM m ORDER BY rowid");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*rows)[i].Int(0), static_cast<std::int64_t>(i));
    EXPECT_EQ((*rows)[i].Text(1), absl::StrCat("row ", i));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseTest,
                         ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgres),
                         testing_util::StoreBackendName);

class PostgresDatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing_util::SharedPostgresServer();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *server;
    auto uri = server_->CreateDatabase();
    ASSERT_TRUE(uri.ok()) << uri.status();
    uri_ = *uri;
  }
  testing_util::PostgresServer* server_ = nullptr;
  std::string uri_;
};

// Processes starting together: the advisory lock lets one migrate while the others wait, and
// they find the schema made.
TEST_F(PostgresDatabaseTest, OpenersAtOnceMigrateOnce) {
  std::atomic<int> applied{0};
  const Migration v1{1, [&](Database& db) {
                       ++applied;
                       if (auto s = db.ExecDdl("CREATE TABLE once (x INTEGER)"); !s.ok()) return s;
                       std::this_thread::sleep_for(std::chrono::milliseconds(200));
                       return db.Exec("INSERT INTO once (x) VALUES (1)").status();
                     }};
  std::vector<std::future<absl::Status>> opens;
  for (int i = 0; i < 6; ++i) {
    opens.push_back(std::async(std::launch::async, [&] {
      return OpenStore(uri_, "--store", "racing", std::vector<Migration>{v1}).status();
    }));
  }
  for (auto& open : opens) EXPECT_TRUE(open.get().ok());
  EXPECT_EQ(applied.load(), 1);
  auto db = OpenStore(uri_, "--store", "racing", std::vector<Migration>{v1});
  ASSERT_TRUE(db.ok()) << db.status();
  auto rows = (*db)->QueryAll("SELECT x FROM once");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1u);
}

// Stores sharing one database keep their tables apart (each in its own schema).
TEST_F(PostgresDatabaseTest, StoresSharingADatabaseKeepTheirTablesApart) {
  auto a = OpenStore(uri_, "--store", "store_a", {});
  auto b = OpenStore(uri_, "--store", "store_b", {});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->ExecDdl("CREATE TABLE events (x INTEGER)").ok());
  ASSERT_TRUE((*b)->ExecDdl("CREATE TABLE events (y TEXT)").ok());
  EXPECT_EQ(*(*a)->Columns("events"), std::set<std::string>{"x"});
  EXPECT_EQ(*(*b)->Columns("events"), std::set<std::string>{"y"});
}

TEST_F(PostgresDatabaseTest, AnUnreachableServerIsUnavailableNamingTheSpec) {
  const std::string uri =
      absl::StrCat("postgresql://postgres@127.0.0.1:", testing_util::FreeLoopbackPort(), "/x");
  auto db = OpenStore(uri, "--store", "s", {});
  EXPECT_EQ(db.status().code(), absl::StatusCode::kUnavailable) << db.status();
  EXPECT_TRUE(IsRetryable(db.status()));
  EXPECT_THAT(db.status().message(), HasSubstr(absl::StrCat("--store = \"", uri, "\"")));
}

// The server stops under an open store and comes back: a statement fails over to a new
// connection (retried with backoff) instead of failing.
TEST_F(PostgresDatabaseTest, AStatementOutlivesARestartOfTheServer) {
  auto db = OpenStore(uri_, "--store", "restart", {});
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)->ExecDdl("CREATE TABLE r (x INTEGER)").ok());
  ASSERT_TRUE(server_->Stop().ok());
  // The insert runs while the server is down; the server is started again from this thread.
  auto insert = std::async(std::launch::async, [&] {
    return (*db)->Write([&] { return (*db)->Exec("INSERT INTO r (x) VALUES (5)").status(); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_TRUE(server_->Start().ok());
  EXPECT_TRUE(insert.get().ok());
  // The failed tries were counted, and the retries with their cause.
  const std::string scrape = metrics::DefaultRegistry().Render();
  EXPECT_GE(testing_util::SampleSum(scrape, "spotdnn_store_retries_total{store=\"restart\""), 1)
      << scrape;
  EXPECT_GE(testing_util::SampleSum(
                scrape, "spotdnn_store_errors_total{store=\"restart\",code=\"UNAVAILABLE\"}"),
            1)
      << scrape;
  auto rows = (*db)->QueryAll("SELECT x FROM r");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].Int(0), 5);
}

}  // namespace
}  // namespace spotdnn::db
