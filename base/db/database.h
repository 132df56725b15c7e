// The database layer every store uses (profiles, jobs, the detector), on two backends: SQLite (the
// embedded default: a file on this machine) and PostgreSQL through libpq (a database several hosts
// share). A store writes each statement once, in the SQL both speak, with `?N` positional
// parameters; the few differences are the dialect's (see Database::Ddl). Errors are absl::Status
// with a code for the kind of failure (UNAVAILABLE and ABORTED may be retried: IsRetryable), and
// transactions are retried whole by one helper (Retry). No gRPC: domain stores use it too.
#ifndef SPOTDNN_BASE_DB_DATABASE_H_
#define SPOTDNN_BASE_DB_DATABASE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/backoff.h"

namespace spotdnn::db {

enum class Backend { kSqlite, kPostgres };

// Where a store lives, parsed from a store spec.
struct StoreSpec {
  Backend backend = Backend::kSqlite;
  // The SQLite file (":memory:" for a private one), or the libpq URI.
  std::string target;
};

// Parses a store spec given as `field` (a flag such as "--store", named in every error with the
// value): `PATH` or `sqlite:PATH` (SQLite), `postgres://…` or `postgresql://…` (a libpq URI).
// INVALID_ARGUMENT for an empty spec or path, an unknown scheme, or a password inside the URI (it
// would show in `ps`; libpq reads it from PGPASSFILE, PGPASSWORD or ~/.pgpass instead).
absl::StatusOr<StoreSpec> ParseStoreSpec(absl::string_view spec, absl::string_view field);

// The store a program opens: `store` (a --store flag's value, checked by ParseStoreSpec and named
// `store_flag` in its errors) when given, else the SQLite file `default_path` (an older path flag).
absl::StatusOr<std::string> ChosenStoreSpec(absl::string_view store, absl::string_view store_flag,
                                            absl::string_view default_path);

// A value bound to a parameter or read from a column.
using Value = std::variant<std::nullptr_t, std::int64_t, double, std::string>;

// One result row. Columns convert as SQL would: a missing or NULL value reads as 0 or "".
class Row {
 public:
  explicit Row(std::vector<Value> values) : values_(std::move(values)) {}
  std::string Text(size_t i) const;
  std::int64_t Int(size_t i) const;
  double Real(size_t i) const;
  bool IsNull(size_t i) const;
  size_t size() const { return values_.size(); }

 private:
  std::vector<Value> values_;
};

// UNAVAILABLE (the database busy, unreachable or its connection lost) and ABORTED (a
// serialization failure or deadlock): the same work may succeed when tried again.
bool IsRetryable(const absl::Status& status);

// How often and how patiently Retry tries.
struct RetryPolicy {
  int max_attempts = 1;  // 1: no retry
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
};

// The policy as the tree's one backoff (base/backoff.h): equal jitter, doubling from
// initial_backoff up to max_backoff, max_attempts in all (at least 1).
base::BackoffOptions BackoffOf(const RetryPolicy& policy);

// Runs `attempt` until it succeeds, fails with an error that is not retryable, or has been tried
// `policy.max_attempts` times, sleeping between tries as BackoffOf(policy) says.
// `before_retry` runs before each further try (a backend reconnecting). The last status.
absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt,
                   const std::function<void()>& before_retry = nullptr);

struct Migration;

// A named lock of a store, held until this object is destroyed or its holder dies (see
// Database::TryHoldLock).
class HeldLock {
 public:
  virtual ~HeldLock() = default;
  // OK while the lock is still held; UNAVAILABLE naming the lock once it may have been lost
  // (PostgreSQL: its connection dropped, and with it the server's lock).
  virtual absl::Status Check() = 0;
};

// What Database::TryHoldLock got: the lock, or who holds it.
struct LockAttempt {
  std::unique_ptr<HeldLock> lock;  // null: another session holds it
  std::string holder;              // then: the `holder` it gave ("" when it cannot be read)
};

// A connection to one store's database. Not thread-safe: the stores serialize their calls.
class Database {
 public:
  using RowFn = std::function<absl::Status(const Row&)>;
  using Body = std::function<absl::Status()>;

  virtual ~Database() = default;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  virtual Backend backend() const = 0;
  // What the store is opened from (the path, or the URI), for messages.
  const std::string& where() const { return where_; }
  // The store's name (OpenStore's `name`), labelling its metrics: spotdnn_store_errors_total
  // and spotdnn_store_retries_total{store,code} in the default registry.
  const std::string& name() const { return name_; }

  // Runs one statement with `params` bound to ?1..?N; the number of rows it changed. Outside a
  // transaction a retryable failure is retried (see Retry).
  absl::StatusOr<std::int64_t> Exec(absl::string_view sql, absl::Span<const Value> params = {});
  // Runs one query, calling `row` for each row (its error ends the query and is returned).
  absl::Status Query(absl::string_view sql, absl::Span<const Value> params, const RowFn& row);
  // Every row of a query.
  absl::StatusOr<std::vector<Row>> QueryAll(absl::string_view sql,
                                            absl::Span<const Value> params = {});
  // The first row of a query, or nullopt when it has none.
  absl::StatusOr<std::optional<Row>> QueryOne(absl::string_view sql,
                                              absl::Span<const Value> params = {});
  // Runs DDL (several statements, no parameters) as rendered by Ddl.
  absl::Status ExecDdl(absl::string_view ddl);

  // Runs `body` in a write transaction: one writer at a time per store (SQLite BEGIN IMMEDIATE;
  // PostgreSQL a transaction holding the store's advisory lock). Committed when `body` returns
  // OK, rolled back otherwise; tried again whole on a retryable failure, so `body` must start
  // from scratch each time.
  absl::Status Write(const Body& body);
  // Runs `body` in a read-only transaction that sees one snapshot while writers carry on.
  absl::Status Read(const Body& body);

  // How patiently a statement or transaction is retried (the backend's default until set): a
  // caller that holds others up while it waits (a lock shared with request handlers) retries
  // briefly and fails over, or tries again later, itself.
  void set_retry_policy(const RetryPolicy& policy) { retry_ = policy; }

  // Takes the lock `name` (any text) of this store unless another session holds it; `holder`
  // says who takes it (e.g. "pid 42 on host-a"), to be read by a session that is refused.
  // PostgreSQL: a session-level advisory lock (pg_try_advisory_lock) on a 64-bit key made from
  // the store's schema and `name`, on a connection of its own kept open while the HeldLock lives
  // (its application_name is `holder`): the server releases it when that connection closes, so
  // a holder killed with kill -9 loses it at once, and one whose host vanished once TCP
  // keepalives give up (about 30 s). SQLite: flock on PATH.locks/NAME.lock beside the database
  // file (the holder written in it), released by the kernel when the holder dies; as local as the
  // file. A private ":memory:" database: always granted (nothing else can see it).
  // UNAVAILABLE naming the store when the lock cannot be asked for.
  virtual absl::StatusOr<LockAttempt> TryHoldLock(absl::string_view name,
                                                  absl::string_view holder) = 0;

  // The dialect hook for schemas. A schema is written as SQLite would have it; on PostgreSQL
  // TEXT compares bytewise (COLLATE "C", as SQLite does), INTEGER is BIGINT, REAL is DOUBLE
  // PRECISION, BLOB is BYTEA, "INTEGER PRIMARY KEY AUTOINCREMENT" an identity column, and the
  // marker {ROWID} (left out on SQLite, where every table has one) adds a `rowid` column that
  // numbers rows in insertion order, so `ORDER BY rowid` reads the same on both.
  virtual std::string Ddl(absl::string_view schema) const = 0;
  // The columns `table` has (empty when it does not exist).
  virtual absl::StatusOr<std::set<std::string>> Columns(absl::string_view table) = 0;
  // Adds `column` of SQL `type` (rendered by Ddl) to `table` unless it has it: a store migrating
  // a database an earlier version wrote.
  absl::Status AddColumnIfMissing(absl::string_view table, absl::string_view column,
                                  absl::string_view type);

 protected:
  enum class TxKind { kWrite, kRead };
  Database(std::string where, RetryPolicy retry) : where_(std::move(where)), retry_(retry) {}

  virtual absl::StatusOr<std::int64_t> DoExec(absl::string_view sql,
                                              absl::Span<const Value> params) = 0;
  virtual absl::Status DoQuery(absl::string_view sql, absl::Span<const Value> params,
                               const RowFn& row) = 0;
  virtual absl::Status DoScript(const std::string& sql) = 0;
  virtual absl::Status Begin(TxKind kind) = 0;
  virtual absl::Status Commit() = 0;
  virtual void Rollback() = 0;
  // Before a retry: whatever makes the next try possible (reconnecting). Nothing by default.
  virtual void Recover() {}

 private:
  absl::Status Transact(TxKind kind, const Body& body);
  // Retries `attempt` unless a transaction is open (its owner retries the whole transaction).
  absl::Status Retried(const std::function<absl::Status()>& attempt);
  // Retry with this store's policy, Recover() and a counted retry before each further try.
  absl::Status RetriedWithRecovery(const std::function<absl::Status()>& attempt);
  // Counts a failure the database answered; returns `status`.
  absl::Status Counted(absl::Status status) const;

  friend absl::StatusOr<std::unique_ptr<Database>> OpenStore(absl::string_view, absl::string_view,
                                                             absl::string_view,
                                                             absl::Span<const Migration>);

  std::string where_;
  std::string name_ = "unnamed";
  RetryPolicy retry_;
  bool in_transaction_ = false;
};

// One step of a store's schema: version `version` made by `apply` (in the migration's
// transaction).
struct Migration {
  int version;
  std::function<absl::Status(Database&)> apply;
};

// Opens the store at `spec` (see ParseStoreSpec; `field` names it in errors) and brings its schema
// to the last of `migrations` (ascending versions), recorded in its schema_version table. SQLite:
// the file (and its folder) created as needed, a 10 s busy timeout, WAL, foreign keys. PostgreSQL:
// the store's tables live in the schema named `name` (so several stores share one database), and
// the migration runs under an advisory lock so processes starting together do not race.
// UNAVAILABLE naming `field` and the spec when it cannot connect or migrate; FAILED_PRECONDITION
// when a newer version wrote the schema.
absl::StatusOr<std::unique_ptr<Database>> OpenStore(absl::string_view spec, absl::string_view field,
                                                    absl::string_view name,
                                                    absl::Span<const Migration> migrations);

// The VALUES list of a multi-row INSERT: `rows` groups of `columns` parameters numbered in order
// ("(?1, ?2), (?3, ?4)" for 2 columns and 2 rows), so that one statement, on either backend,
// stores many rows in one round trip. Keep rows * columns under 32,766 (SQLite's limit).
std::string ValuesRows(size_t columns, size_t rows);

// The schema version recorded in `db` (0 when none is).
absl::StatusOr<int> SchemaVersion(Database& db);

}  // namespace spotdnn::db

#endif  // SPOTDNN_BASE_DB_DATABASE_H_
