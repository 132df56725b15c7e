// The database layer every store uses (profiles, jobs, the detector): RAII helpers over the SQLite
// C API (a prepared statement, an immediate transaction, opening with the shared pragmas) and
// SQLite errors as absl::Status with a code for the kind of failure. No gRPC: domain stores use it
// too.
#ifndef SPOTDNN_SERVICES_COMMON_DB_SQLITE_H_
#define SPOTDNN_SERVICES_COMMON_DB_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace spotdnn::sql {

// `what` and SQLite's message, with a status code for the kind of failure.
inline absl::Status SqlError(sqlite3* db, absl::string_view what) {
  const int code = sqlite3_extended_errcode(db);
  const std::string message = absl::StrCat(what, ": ", sqlite3_errmsg(db));
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(message, " (the database is busy; retry)"));
    case SQLITE_CONSTRAINT:
      return absl::InvalidArgumentError(message);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    status_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK
                  ? absl::OkStatus()
                  : SqlError(db, absl::StrCat("preparing \"", sql, "\""));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  const absl::Status& status() const { return status_; }
  sqlite3_stmt* get() { return stmt_; }
  void Text(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
  }
  void Int(int i, std::int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Real(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  // Steps once; true on a row, false when done; an error status otherwise.
  absl::StatusOr<bool> Step(absl::string_view what) {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqlError(db_, what);
  }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  // Steps once and expects no row (an INSERT, UPDATE or DELETE).
  absl::Status Run(absl::string_view what) {
    absl::StatusOr<bool> row = Step(what);
    if (!row.ok()) return row.status();
    return absl::OkStatus();
  }
  std::int64_t ColumnInt(int i) { return sqlite3_column_int64(stmt_, i); }
  double ColumnReal(int i) { return sqlite3_column_double(stmt_, i); }
  std::string ColumnText(int i) {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, i));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless Commit() succeeded.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {
    status_ = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK
                  ? absl::OkStatus()
                  : SqlError(db, "starting a transaction");
  }
  ~Transaction() {
    if (status_.ok() && !committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  const absl::Status& status() const { return status_; }
  absl::Status Commit() {
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      return SqlError(db_, "committing");
    }
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  absl::Status status_;
  bool committed_ = false;
};

// Runs `sql` (one statement or several).
inline absl::Status Exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status s = SqlError(db, error != nullptr ? error : sql);
    sqlite3_free(error);
    return s;
  }
  return absl::OkStatus();
}

// Adds `column` (of SQL `type`) to `table` unless it has it: a store migrating a file an older
// version wrote.
inline absl::Status AddColumnIfMissing(sqlite3* db, const std::string& table,
                                       const std::string& column, const std::string& type) {
  const std::string info = absl::StrCat("PRAGMA table_info(", table, ")");
  Statement q(db, info.c_str());
  if (!q.status().ok()) return q.status();
  while (true) {
    absl::StatusOr<bool> row = q.Step(info);
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (q.ColumnText(1) == column) return absl::OkStatus();
  }
  const std::string alter = absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column, " ", type);
  return Exec(db, alter.c_str());
}

// Opens or creates the database at `path` (its folder too; ":memory:" for a private one) for
// several threads and processes: a 10 s busy timeout, WAL, foreign keys, then `schema`.
// UNAVAILABLE naming `what` and the path when it cannot.
inline absl::StatusOr<sqlite3*> OpenDatabase(const std::string& path, absl::string_view what,
                                             const char* schema) {
  if (path != ":memory:") {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string reason = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat(what, " = \"", path, "\": cannot open: ", reason));
  }
  sqlite3_busy_timeout(db, 10000);
  for (const char* sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON", schema}) {
    if (absl::Status s = Exec(db, sql); !s.ok()) {
      sqlite3_close(db);
      return absl::UnavailableError(absl::StrCat(what, " = \"", path, "\": ", s.message()));
    }
  }
  return db;
}

}  // namespace spotdnn::sql

#endif  // SPOTDNN_SERVICES_COMMON_DB_SQLITE_H_
