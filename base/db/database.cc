#include "base/db/database.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/db/backends.h"
#include "base/metrics.h"

namespace spotdnn::db {
namespace {

// The database layer's metrics in the process's registry.
struct StoreMetrics {
  metrics::Family<metrics::Counter>& errors = metrics::DefaultRegistry().Counters(
      "spotdnn_store_errors_total",
      "statements and transaction steps the database failed, each try counted, by store and "
      "status code (UNAVAILABLE: unreachable or busy, ABORTED: a serialization failure, ...)",
      {"store", "code"});
  metrics::Family<metrics::Counter>& retries = metrics::DefaultRegistry().Counters(
      "spotdnn_store_retries_total",
      "operations or transactions tried again after a retryable failure, by store and the "
      "failure's status code",
      {"store", "code"});
};

StoreMetrics& Metrics() {
  static StoreMetrics* m = new StoreMetrics();  // lives as long as the process
  return *m;
}

// The URI with its password (if any) replaced by "***", for messages.
std::string WithoutPassword(absl::string_view uri, size_t colon, size_t at) {
  return absl::StrCat(uri.substr(0, colon + 1), "***", uri.substr(at));
}

}  // namespace

absl::StatusOr<StoreSpec> ParseStoreSpec(absl::string_view spec, absl::string_view field) {
  auto bad = [&](absl::string_view shown, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", shown, "\": ", why));
  };
  if (spec.empty()) {
    return bad(spec, "empty: give a file (PATH or sqlite:PATH) or a postgres://… URI");
  }
  for (absl::string_view scheme : {"postgres://", "postgresql://"}) {
    if (!absl::StartsWith(spec, scheme)) continue;
    // postgresql://[userinfo@][host][:port][/dbname][?param=value&…]
    const absl::string_view rest = spec.substr(scheme.size());
    const size_t authority_end = std::min(rest.find('/'), rest.find('?'));
    const absl::string_view authority = rest.substr(0, authority_end);
    const size_t at = authority.rfind('@');
    if (at != absl::string_view::npos) {
      const size_t colon = authority.substr(0, at).find(':');
      if (colon != absl::string_view::npos) {
        return bad(WithoutPassword(spec, scheme.size() + colon, scheme.size() + at),
                   "a password in the URI shows in `ps`: leave it out and put it in PGPASSFILE "
                   "(or ~/.pgpass) or PGPASSWORD");
      }
    }
    const size_t query = rest.find('?');
    if (query != absl::string_view::npos) {
      for (absl::string_view param : absl::StrSplit(rest.substr(query + 1), '&')) {
        if (absl::StartsWith(param, "password=")) {
          return bad(absl::StrReplaceAll(spec, {{param, "password=***"}}),
                     "a password in the URI shows in `ps`: leave it out and put it in "
                     "PGPASSFILE (or ~/.pgpass) or PGPASSWORD");
        }
      }
    }
    return StoreSpec{Backend::kPostgres, std::string(spec)};
  }
  absl::string_view path = spec;
  if (absl::ConsumePrefix(&path, "sqlite:")) {
    if (path.empty()) return bad(spec, "no file after \"sqlite:\"");
    return StoreSpec{Backend::kSqlite, std::string(path)};
  }
  if (const size_t sep = spec.find("://"); sep != absl::string_view::npos) {
    return bad(spec, absl::StrCat("unknown scheme \"", spec.substr(0, sep),
                                  "\": expected PATH, sqlite:PATH or postgres://…"));
  }
  return StoreSpec{Backend::kSqlite, std::string(spec)};
}

absl::StatusOr<std::string> ChosenStoreSpec(absl::string_view store, absl::string_view store_flag,
                                            absl::string_view default_path) {
  if (store.empty()) return std::string(default_path);
  absl::StatusOr<StoreSpec> spec = ParseStoreSpec(store, store_flag);
  if (!spec.ok()) return spec.status();
  return std::string(store);
}

std::string Row::Text(size_t i) const {
  if (i >= values_.size()) return "";
  const Value& v = values_[i];
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* n = std::get_if<std::int64_t>(&v)) return absl::StrCat(*n);
  if (const auto* d = std::get_if<double>(&v)) return absl::StrCat(*d);
  return "";
}

std::int64_t Row::Int(size_t i) const {
  if (i >= values_.size()) return 0;
  const Value& v = values_[i];
  if (const auto* n = std::get_if<std::int64_t>(&v)) return *n;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<std::int64_t>(*d);
  if (const auto* s = std::get_if<std::string>(&v)) {
    std::int64_t n = 0;
    if (absl::SimpleAtoi(*s, &n)) return n;
    double d = 0;
    return absl::SimpleAtod(*s, &d) ? static_cast<std::int64_t>(d) : 0;
  }
  return 0;
}

double Row::Real(size_t i) const {
  if (i >= values_.size()) return 0;
  const Value& v = values_[i];
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* n = std::get_if<std::int64_t>(&v)) return static_cast<double>(*n);
  if (const auto* s = std::get_if<std::string>(&v)) {
    double d = 0;
    return absl::SimpleAtod(*s, &d) ? d : 0;
  }
  return 0;
}

bool Row::IsNull(size_t i) const {
  return i >= values_.size() || std::holds_alternative<std::nullptr_t>(values_[i]);
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsAborted(status);
}

base::BackoffOptions BackoffOf(const RetryPolicy& policy) {
  // Equal jitter (half to all of the ceiling) so processes that failed together retry apart.
  return {.max_attempts = std::max(policy.max_attempts, 1),  // 0 would mean no limit there
          .initial = policy.initial_backoff,
          .max = std::max(policy.max_backoff, policy.initial_backoff),
          .jitter = base::Jitter::kEqual};
}

absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt,
                   const std::function<void()>& before_retry) {
  const base::BackoffPolicy backoff_policy(BackoffOf(policy));
  base::Backoff backoff(backoff_policy);
  while (true) {
    absl::Status status = attempt();
    if (status.ok() || !IsRetryable(status)) return status;
    std::optional<absl::Duration> wait = backoff.Failed();
    if (!wait.has_value()) return status;
    backoff_policy.Sleep(*wait);
    if (before_retry) before_retry();
  }
}

absl::Status Database::Retried(const std::function<absl::Status()>& attempt) {
  if (in_transaction_) return attempt();
  return RetriedWithRecovery(attempt);
}

absl::Status Database::RetriedWithRecovery(const std::function<absl::Status()>& attempt) {
  absl::Status last;
  return Retry(
      retry_,
      [&] {
        last = attempt();
        return last;
      },
      [&] {
        Metrics().retries.WithLabels({name_, absl::StatusCodeToString(last.code())}).Increment();
        Recover();
      });
}

absl::Status Database::Counted(absl::Status status) const {
  if (!status.ok()) {
    Metrics().errors.WithLabels({name_, absl::StatusCodeToString(status.code())}).Increment();
  }
  return status;
}

absl::StatusOr<std::int64_t> Database::Exec(absl::string_view sql, absl::Span<const Value> params) {
  std::int64_t changed = 0;
  absl::Status status = Retried([&]() -> absl::Status {
    absl::StatusOr<std::int64_t> n = DoExec(sql, params);
    if (!n.ok()) return Counted(n.status());
    changed = *n;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return changed;
}

absl::Status Database::Query(absl::string_view sql, absl::Span<const Value> params,
                             const RowFn& row) {
  return Retried([&] {
    // An error of `row` is the caller's, not the database's.
    bool row_failed = false;
    absl::Status status = DoQuery(sql, params, [&](const Row& r) {
      absl::Status s = row(r);
      row_failed = !s.ok();
      return s;
    });
    return row_failed ? status : Counted(status);
  });
}

absl::StatusOr<std::vector<Row>> Database::QueryAll(absl::string_view sql,
                                                    absl::Span<const Value> params) {
  std::vector<Row> rows;
  absl::Status status = Retried([&] {
    rows.clear();
    return Counted(DoQuery(sql, params, [&](const Row& r) {
      rows.push_back(r);
      return absl::OkStatus();
    }));
  });
  if (!status.ok()) return status;
  return rows;
}

absl::StatusOr<std::optional<Row>> Database::QueryOne(absl::string_view sql,
                                                      absl::Span<const Value> params) {
  absl::StatusOr<std::vector<Row>> rows = QueryAll(sql, params);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::nullopt;
  return std::optional<Row>(std::move(rows->front()));
}

absl::Status Database::ExecDdl(absl::string_view ddl) {
  const std::string sql = Ddl(ddl);
  return Retried([&] { return Counted(DoScript(sql)); });
}

absl::Status Database::Transact(TxKind kind, const Body& body) {
  if (in_transaction_) return body();  // a nested call joins the transaction it is in
  return RetriedWithRecovery([&]() -> absl::Status {
    if (absl::Status s = Begin(kind); !s.ok()) return Counted(s);
    in_transaction_ = true;
    absl::Status status = body();
    if (status.ok()) status = Counted(Commit());
    in_transaction_ = false;
    if (!status.ok()) Rollback();
    return status;
  });
}

absl::Status Database::Write(const Body& body) { return Transact(TxKind::kWrite, body); }

absl::Status Database::Read(const Body& body) { return Transact(TxKind::kRead, body); }

absl::Status Database::AddColumnIfMissing(absl::string_view table, absl::string_view column,
                                          absl::string_view type) {
  absl::StatusOr<std::set<std::string>> have = Columns(table);
  if (!have.ok()) return have.status();
  if (have->count(std::string(column))) return absl::OkStatus();
  return ExecDdl(absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column, " ", type));
}

std::string ValuesRows(size_t columns, size_t rows) {
  std::string out;
  out.reserve(rows * columns * 6);
  size_t n = 0;
  for (size_t r = 0; r < rows; ++r) {
    out += r == 0 ? "(" : ", (";
    for (size_t c = 0; c < columns; ++c) absl::StrAppend(&out, c == 0 ? "?" : ", ?", ++n);
    out += ")";
  }
  return out;
}

absl::StatusOr<int> SchemaVersion(Database& db) {
  absl::StatusOr<std::set<std::string>> columns = db.Columns("schema_version");
  if (!columns.ok()) return columns.status();
  if (columns->empty()) return 0;
  absl::StatusOr<std::optional<Row>> row = db.QueryOne("SELECT MAX(version) FROM schema_version");
  if (!row.ok()) return row.status();
  return *row ? static_cast<int>((*row)->Int(0)) : 0;
}

namespace {

absl::Status Migrate(Database& db, absl::Span<const Migration> migrations) {
  return db.Write([&]() -> absl::Status {
    if (absl::Status s = db.ExecDdl("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER "
                                    "NOT NULL)");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<int> version = SchemaVersion(db);
    if (!version.ok()) return version.status();
    const int latest = migrations.empty() ? 0 : migrations.back().version;
    if (*version > latest) {
      return absl::FailedPreconditionError(
          absl::StrCat("schema version ", *version, " is newer than this program's (", latest,
                       "): a newer spotdnn wrote it; upgrade this one"));
    }
    for (const Migration& m : migrations) {
      if (m.version <= *version) continue;
      if (absl::Status s = m.apply(db); !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("migrating to schema version ", m.version, ": ", s.message()));
      }
    }
    if (latest == *version) return absl::OkStatus();
    if (auto s = db.Exec("DELETE FROM schema_version"); !s.ok()) return s.status();
    if (auto s = db.Exec("INSERT INTO schema_version (version) VALUES (?1)",
                         {Value(std::int64_t{latest})});
        !s.ok()) {
      return s.status();
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenStore(absl::string_view spec, absl::string_view field,
                                                    absl::string_view name,
                                                    absl::Span<const Migration> migrations) {
  absl::StatusOr<StoreSpec> parsed = ParseStoreSpec(spec, field);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::unique_ptr<Database>> db = parsed->backend == Backend::kSqlite
                                                     ? OpenSqlite(parsed->target, field)
                                                     : OpenPostgres(parsed->target, field, name);
  if (!db.ok()) return db.status();
  (*db)->name_ = std::string(name);
  if (absl::Status s = Migrate(**db, migrations); !s.ok()) {
    return absl::Status(absl::IsFailedPrecondition(s) ? s.code() : absl::StatusCode::kUnavailable,
                        absl::StrCat(field, " = \"", (*db)->where(), "\": ", s.message()));
  }
  return db;
}

}  // namespace spotdnn::db
