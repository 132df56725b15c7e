// The SQLite backend: one connection (serialized mode), prepared statements kept by their text.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/db/backends.h"

namespace spotdnn::db {
namespace {

// SQLite's last error on `db` with a status code for its kind.
absl::Status SqliteError(sqlite3* db, absl::string_view sql) {
  const int code = sqlite3_extended_errcode(db);
  const std::string message = absl::StrCat(sqlite3_errmsg(db), " (in \"", Abbreviated(sql), "\")");
  switch (code) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return absl::AlreadyExistsError(message);
    default:
      break;
  }
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(message, ": the database is busy; retry"));
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return absl::InvalidArgumentError(message);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::UnavailableError(message);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    default:
      return absl::InternalError(message);
  }
}

// A lock name as a file name: letters, digits, '.', '_' and '-' kept, other bytes as %XX (and a
// leading '.' too, so no name is hidden or "..").
std::string LockFileName(absl::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = name[i];
    if (absl::ascii_isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0)) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out + ".lock";
}

// A lock file held with flock; closing it (or the holder dying) lets go.
class FileLock final : public HeldLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {}
  ~FileLock() override {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Check() override { return absl::OkStatus(); }  // held while the file is open

 private:
  int fd_;
};

class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(sqlite3* db, std::string path)
      : Database(std::move(path), RetryPolicy{}), db_(db) {}
  ~SqliteDatabase() override {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  Backend backend() const override { return Backend::kSqlite; }

  std::string Ddl(absl::string_view schema) const override {
    return absl::StrReplaceAll(schema, {{"{ROWID}", ""}});
  }

  absl::StatusOr<LockAttempt> TryHoldLock(absl::string_view name,
                                          absl::string_view holder) override {
    if (where() == ":memory:") return LockAttempt{.lock = std::make_unique<FileLock>(-1)};
    const std::filesystem::path dir = where() + ".locks";
    const std::filesystem::path path = dir / LockFileName(name);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("lock \"", name, "\" of store ", where(), ": ",
                                                 path.string(),
                                                 " cannot be opened: ", std::strerror(errno)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      char buffer[256] = {0};
      const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
      close(fd);
      if (error != EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrCat("lock \"", name, "\" of store ", where(), ": ",
                                                   path.string(),
                                                   " cannot be locked: ", std::strerror(error)));
      }
      return LockAttempt{
          .holder =
              n > 0 ? std::string(absl::StripAsciiWhitespace(absl::string_view(buffer, n))) : ""};
    }
    // The holder is only read by a refused session: a failed write leaves the lock held.
    const std::string text = absl::StrCat(holder, "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) {
    }
    return LockAttempt{.lock = std::make_unique<FileLock>(fd)};
  }

  absl::StatusOr<std::set<std::string>> Columns(absl::string_view table) override {
    std::set<std::string> out;
    absl::Status s =
        DoQuery(absl::StrCat("PRAGMA table_info(", table, ")"), {}, [&](const Row& row) {
          out.insert(row.Text(1));
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }

 protected:
  absl::StatusOr<std::int64_t> DoExec(absl::string_view sql,
                                      absl::Span<const Value> params) override {
    absl::Status s = Run(sql, params, nullptr);
    if (!s.ok()) return s;
    return sqlite3_changes(db_);
  }

  absl::Status DoQuery(absl::string_view sql, absl::Span<const Value> params,
                       const RowFn& row) override {
    return Run(sql, params, &row);
  }

  absl::Status DoScript(const std::string& sql) override {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      absl::Status s = SqliteError(db_, sql);
      sqlite3_free(error);
      return s;
    }
    return absl::OkStatus();
  }

  absl::Status Begin(TxKind kind) override {
    return DoScript(kind == TxKind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN");
  }
  absl::Status Commit() override { return DoScript("COMMIT"); }
  void Rollback() override {
    if (!sqlite3_get_autocommit(db_)) (void)DoScript("ROLLBACK");
  }

 private:
  // Prepares (once per text) and steps `sql`, calling `row` for each row when given.
  absl::Status Run(absl::string_view sql, absl::Span<const Value> params, const RowFn* row) {
    sqlite3_stmt*& stmt = statements_[std::string(sql)];
    if (stmt == nullptr && sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt,
                                              nullptr) != SQLITE_OK) {
      absl::Status s = SqliteError(db_, sql);
      statements_.erase(std::string(sql));
      return s;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const int at = static_cast<int>(i) + 1;
      const Value& v = params[i];
      if (const auto* n = std::get_if<std::int64_t>(&v)) {
        sqlite3_bind_int64(stmt, at, *n);
      } else if (const auto* d = std::get_if<double>(&v)) {
        sqlite3_bind_double(stmt, at, *d);
      } else if (const auto* t = std::get_if<std::string>(&v)) {
        sqlite3_bind_text(stmt, at, t->data(), static_cast<int>(t->size()), SQLITE_STATIC);
      } else {
        sqlite3_bind_null(stmt, at);
      }
    }
    absl::Status status;
    while (true) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        status = SqliteError(db_, sql);
        break;
      }
      if (row == nullptr) continue;
      const int n = sqlite3_column_count(stmt);
      std::vector<Value> values;
      values.reserve(n);
      for (int i = 0; i < n; ++i) {
        switch (sqlite3_column_type(stmt, i)) {
          case SQLITE_INTEGER:
            values.emplace_back(std::int64_t{sqlite3_column_int64(stmt, i)});
            break;
          case SQLITE_FLOAT:
            values.emplace_back(sqlite3_column_double(stmt, i));
            break;
          case SQLITE_NULL:
            values.emplace_back(nullptr);
            break;
          default: {
            const void* bytes = sqlite3_column_blob(stmt, i);
            values.emplace_back(bytes == nullptr ? std::string()
                                                 : std::string(static_cast<const char*>(bytes),
                                                               sqlite3_column_bytes(stmt, i)));
          }
        }
      }
      status = (*row)(Row(std::move(values)));
      if (!status.ok()) break;
    }
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return status;
  }

  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path,
                                                     absl::string_view field) {
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
    return absl::UnavailableError(absl::StrCat(field, " = \"", path, "\": cannot open: ", reason));
  }
  sqlite3_busy_timeout(db, 10000);
  auto out = std::make_unique<SqliteDatabase>(db, path);
  if (absl::Status s = out->ExecDdl(
          "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON");
      !s.ok()) {
    return absl::UnavailableError(absl::StrCat(field, " = \"", path, "\": ", s.message()));
  }
  return out;
}

}  // namespace spotdnn::db
