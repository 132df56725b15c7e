#include "services/gateway/job/job_store.h"

#include <sqlite3.h>

#include <functional>
#include <tuple>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "services/common/db/sqlite.h"

namespace spotdnn::job {
namespace {

using sql::SqlError;
using sql::Statement;

// A member stored as the text of its name (an enum): how to write and read it.
template <typename R>
struct Named {
  std::function<std::string(const R&)> get;
  std::function<absl::Status(R&, absl::string_view)> set;
};

// An enum member of R with its Name() and its parser.
template <typename R, typename E, typename Parse>
Named<R> NamedEnum(E R::*member, Parse parse) {
  return {[member](const R& r) { return std::string(Name(r.*member)); },
          [member, parse](R& r, absl::string_view text) -> absl::Status {
            auto value = parse(text);
            if (!value.ok()) return value.status();
            r.*member = *value;
            return absl::OkStatus();
          }};
}

// One column of a record: its name and the member it maps to.
template <typename R>
struct Column {
  const char* name;
  std::variant<std::string R::*, int64_t R::*, double R::*, int R::*, Named<R>> member;
};

template <typename R>
std::string ColumnList(const std::vector<Column<R>>& columns) {
  return absl::StrJoin(columns, ", ",
                       [](std::string* out, const Column<R>& c) { absl::StrAppend(out, c.name); });
}

// Binds every column of `r` to ?1..?N in order. Text is copied (SQLITE_TRANSIENT is not needed:
// the statement runs before `r` goes), names of enums are built here and kept in `names`.
template <typename R>
void Bind(Statement& q, const std::vector<Column<R>>& columns, const R& r,
          std::vector<std::string>& names) {
  names.reserve(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    const int at = static_cast<int>(i) + 1;
    std::visit(
        [&](const auto& member) {
          using M = std::decay_t<decltype(member)>;
          if constexpr (std::is_same_v<M, Named<R>>) {
            names.push_back(member.get(r));
            q.Text(at, names.back());
          } else {
            using T = std::decay_t<decltype(r.*member)>;
            if constexpr (std::is_same_v<T, std::string>) {
              q.Text(at, r.*member);
            } else if constexpr (std::is_same_v<T, double>) {
              q.Real(at, r.*member);
            } else {
              q.Int(at, r.*member);
            }
          }
        },
        columns[i].member);
  }
}

template <typename R>
absl::StatusOr<R> Read(Statement& q, const std::vector<Column<R>>& columns) {
  R r;
  absl::Status status;
  for (size_t i = 0; i < columns.size() && status.ok(); ++i) {
    const int at = static_cast<int>(i);
    std::visit(
        [&](const auto& member) {
          using M = std::decay_t<decltype(member)>;
          if constexpr (std::is_same_v<M, Named<R>>) {
            status = member.set(r, q.ColumnText(at));
          } else {
            using T = std::decay_t<decltype(r.*member)>;
            if constexpr (std::is_same_v<T, std::string>) {
              r.*member = q.ColumnText(at);
            } else if constexpr (std::is_same_v<T, double>) {
              r.*member = q.ColumnReal(at);
            } else {
              r.*member = static_cast<T>(q.ColumnInt(at));
            }
          }
        },
        columns[i].member);
  }
  if (!status.ok()) return status;
  return r;
}

const std::vector<Column<JobRecord>>& JobColumns() {
  static const auto* columns =
      new std::vector<Column<JobRecord>>{{"id", &JobRecord::id},
                                         {"spec_json", &JobRecord::spec_json},
                                         {"state", NamedEnum(&JobRecord::state, ParseJobState)},
                                         {"message", &JobRecord::message},
                                         {"created_ms", &JobRecord::created_ms},
                                         {"started_ms", &JobRecord::started_ms},
                                         {"finished_ms", &JobRecord::finished_ms},
                                         {"workload_json", &JobRecord::workload_json},
                                         {"catalog_json", &JobRecord::catalog_json},
                                         {"plan_json", &JobRecord::plan_json},
                                         {"target_iterations", &JobRecord::target_iterations},
                                         {"predicted_time_s", &JobRecord::predicted_time_s},
                                         {"predicted_cost_usd", &JobRecord::predicted_cost_usd},
                                         {"iterations_done", &JobRecord::iterations_done},
                                         {"loss", &JobRecord::loss},
                                         {"steps_lost", &JobRecord::steps_lost},
                                         {"last_event_seq", &JobRecord::last_event_seq},
                                         {"ps_addresses", &JobRecord::ps_addresses},
                                         {"next_worker_index", &JobRecord::next_worker_index},
                                         {"takeovers", &JobRecord::takeovers}};
  return *columns;
}

const std::vector<Column<InstanceRecord>>& InstanceColumns() {
  static const auto* columns = new std::vector<Column<InstanceRecord>>{
      {"job_id", &InstanceRecord::job_id},
      {"id", &InstanceRecord::id},
      {"role", Named<InstanceRecord>{
                   [](const InstanceRecord& r) { return std::string(launcher::RoleName(r.role)); },
                   [](InstanceRecord& r, absl::string_view text) {
                     auto role = launcher::ParseRole(text);
                     if (!role.ok()) return role.status();
                     r.role = *role;
                     return absl::OkStatus();
                   }}},
      {"instance_type", &InstanceRecord::instance_type},
      {"idx", &InstanceRecord::index},
      {"reason", NamedEnum(&InstanceRecord::reason, ParseLaunchReason)},
      {"launch_token", &InstanceRecord::launch_token},
      {"price_per_hour", &InstanceRecord::price_per_hour},
      {"predicted_iteration_s", &InstanceRecord::predicted_iteration_s},
      {"metadata_endpoint", &InstanceRecord::metadata_endpoint},
      {"metadata_cloud", &InstanceRecord::metadata_cloud},
      {"state", NamedEnum(&InstanceRecord::state, ParseInstanceStatus)},
      {"launched_ms", &InstanceRecord::launched_ms},
      {"ended_ms", &InstanceRecord::ended_ms}};
  return *columns;
}

const std::vector<Column<RevocationRecord>>& RevocationColumns() {
  static const auto* columns = new std::vector<Column<RevocationRecord>>{
      {"job_id", &RevocationRecord::job_id},
      {"instance_id", &RevocationRecord::instance_id},
      {"kind", &RevocationRecord::kind},
      {"cloud_notice_ms", &RevocationRecord::cloud_notice_ms},
      {"effective_ms", &RevocationRecord::effective_ms},
      {"received_ms", &RevocationRecord::received_ms},
      {"replanned_ms", &RevocationRecord::replanned_ms},
      {"replan_json", &RevocationRecord::replan_json},
      {"takeover_token", &RevocationRecord::takeover_token},
      {"takeover_ids", &RevocationRecord::takeover_ids},
      {"takeover_first_index", &RevocationRecord::takeover_first_index},
      {"takeover_launched_ms", &RevocationRecord::takeover_launched_ms},
      {"takeover_reported_ms", &RevocationRecord::takeover_reported_ms},
      {"ended_ms", &RevocationRecord::ended_ms},
      {"status", NamedEnum(&RevocationRecord::status, ParseRevocationStatus)},
      {"detail", &RevocationRecord::detail}};
  return *columns;
}

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, spec_json TEXT, state TEXT, message TEXT, created_ms INTEGER,
  started_ms INTEGER, finished_ms INTEGER, workload_json TEXT, catalog_json TEXT, plan_json TEXT,
  target_iterations REAL, predicted_time_s REAL, predicted_cost_usd REAL, iterations_done REAL,
  loss REAL, steps_lost REAL,
  last_event_seq INTEGER, ps_addresses TEXT, next_worker_index INTEGER, takeovers INTEGER);
CREATE TABLE IF NOT EXISTS instances (
  job_id TEXT NOT NULL REFERENCES jobs(id), id TEXT NOT NULL, role TEXT, instance_type TEXT,
  idx INTEGER, reason TEXT, launch_token TEXT, price_per_hour REAL, predicted_iteration_s REAL,
  metadata_endpoint TEXT, metadata_cloud TEXT, state TEXT, launched_ms INTEGER,
  ended_ms INTEGER, PRIMARY KEY (job_id, id));
CREATE TABLE IF NOT EXISTS revocations (
  job_id TEXT NOT NULL REFERENCES jobs(id), instance_id TEXT NOT NULL, kind TEXT,
  cloud_notice_ms INTEGER, effective_ms INTEGER, received_ms INTEGER, replanned_ms INTEGER,
  replan_json TEXT, takeover_token TEXT, takeover_ids TEXT, takeover_first_index INTEGER,
  takeover_launched_ms INTEGER,
  takeover_reported_ms INTEGER, ended_ms INTEGER, status TEXT, detail TEXT,
  PRIMARY KEY (job_id, instance_id));
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL REFERENCES jobs(id), at_ms INTEGER, kind TEXT, detail TEXT);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id);
CREATE TABLE IF NOT EXISTS progress (
  job_id TEXT NOT NULL REFERENCES jobs(id), at_ms INTEGER, iterations REAL, loss REAL);
CREATE INDEX IF NOT EXISTS progress_by_job ON progress (job_id);
)sql";

// INSERT [OR REPLACE] of every column.
template <typename R>
absl::Status Insert(sqlite3* db, const char* verb, const char* table,
                    const std::vector<Column<R>>& columns, const R& r) {
  std::vector<std::string> marks;
  for (size_t i = 1; i <= columns.size(); ++i) marks.push_back(absl::StrCat("?", i));
  const std::string sql = absl::StrCat(verb, " INTO ", table, " (", ColumnList(columns),
                                       ") VALUES (", absl::StrJoin(marks, ", "), ")");
  Statement q(db, sql.c_str());
  if (!q.status().ok()) return q.status();
  std::vector<std::string> names;
  Bind(q, columns, r, names);
  return q.Run(absl::StrCat("writing ", table));
}

// Every row of `table` for a job, in insertion order.
template <typename R>
absl::StatusOr<std::vector<R>> SelectForJob(sqlite3* db, const char* table, const char* job_column,
                                            const std::vector<Column<R>>& columns,
                                            const std::string& job_id) {
  const std::string sql = absl::StrCat("SELECT ", ColumnList(columns), " FROM ", table, " WHERE ",
                                       job_column, " = ?1 ORDER BY rowid");
  Statement q(db, sql.c_str());
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  std::vector<R> out;
  while (true) {
    auto row = q.Step(absl::StrCat("reading ", table));
    if (!row.ok()) return row.status();
    if (!*row) return out;
    absl::StatusOr<R> record = Read(q, columns);
    if (!record.ok()) return record.status();
    out.push_back(*std::move(record));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  absl::StatusOr<sqlite3*> db = sql::OpenDatabase(path, "job db", kSchema);
  if (!db.ok()) return db.status();
  // A job store from an earlier version: the columns it lacks are added.
  for (const auto& [table, column, type] :
       {std::tuple{"instances", "metadata_cloud", "TEXT"}, std::tuple{"jobs", "loss", "REAL"},
        std::tuple{"jobs", "steps_lost", "REAL"}}) {
    if (absl::Status s = sql::AddColumnIfMissing(*db, table, column, type); !s.ok()) {
      sqlite3_close(*db);
      return s;
    }
  }
  return std::unique_ptr<JobStore>(new JobStore(*db));
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::CreateJob(const JobRecord& job) {
  if (job.id.empty()) return absl::InvalidArgumentError("job id is empty");
  absl::MutexLock lock(&mu_);
  absl::Status s = Insert(db_, "INSERT", "jobs", JobColumns(), job);
  if (absl::IsInvalidArgument(s)) {  // the primary key
    return absl::AlreadyExistsError(
        absl::StrCat("job \"", job.id, "\" already exists: resume it with `spotdnn run --resume ",
                     job.id, "` or give the job another name"));
  }
  return s;
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto rows = SelectForJob(db_, "jobs", "id", JobColumns(), id);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return absl::NotFoundError(absl::StrCat("job \"", id, "\" is not in the job store"));
  }
  return rows->front();
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  const std::string sql =
      absl::StrCat("SELECT ", ColumnList(JobColumns()), " FROM jobs ORDER BY created_ms, id");
  Statement q(db_, sql.c_str());
  if (!q.status().ok()) return q.status();
  std::vector<JobRecord> out;
  while (true) {
    auto row = q.Step("reading jobs");
    if (!row.ok()) return row.status();
    if (!*row) return out;
    absl::StatusOr<JobRecord> record = Read(q, JobColumns());
    if (!record.ok()) return record.status();
    out.push_back(*std::move(record));
  }
}

absl::Status JobStore::UpdateJob(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  {
    Statement q(db_, "SELECT 1 FROM jobs WHERE id = ?1");
    if (!q.status().ok()) return q.status();
    q.Text(1, job.id);
    auto row = q.Step("reading jobs");
    if (!row.ok()) return row.status();
    if (!*row) return absl::NotFoundError(absl::StrCat("job \"", job.id, "\" is not stored"));
  }
  return Insert(db_, "INSERT OR REPLACE", "jobs", JobColumns(), job);
}

absl::Status JobStore::PutInstance(const InstanceRecord& instance) {
  absl::MutexLock lock(&mu_);
  return Insert(db_, "INSERT OR REPLACE", "instances", InstanceColumns(), instance);
}

absl::StatusOr<std::vector<InstanceRecord>> JobStore::Instances(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return SelectForJob(db_, "instances", "job_id", InstanceColumns(), job_id);
}

absl::Status JobStore::PutRevocation(const RevocationRecord& revocation) {
  absl::MutexLock lock(&mu_);
  return Insert(db_, "INSERT OR REPLACE", "revocations", RevocationColumns(), revocation);
}

absl::StatusOr<std::vector<RevocationRecord>> JobStore::Revocations(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return SelectForJob(db_, "revocations", "job_id", RevocationColumns(), job_id);
}

absl::Status JobStore::AddEvent(const std::string& job_id, const std::string& kind,
                                const std::string& detail, int64_t at_ms) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "INSERT INTO events (job_id, at_ms, kind, detail) VALUES (?1, ?2, ?3, ?4)");
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  q.Int(2, at_ms);
  q.Text(3, kind);
  q.Text(4, detail);
  return q.Run("writing events");
}

absl::StatusOr<std::vector<JobEventRecord>> JobStore::Events(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  static const auto* columns =
      new std::vector<Column<JobEventRecord>>{{"at_ms", &JobEventRecord::at_ms},
                                              {"kind", &JobEventRecord::kind},
                                              {"detail", &JobEventRecord::detail}};
  return SelectForJob(db_, "events", "job_id", *columns, job_id);
}

absl::Status JobStore::AddProgress(const std::string& job_id, const ProgressRecord& point) {
  absl::MutexLock lock(&mu_);
  Statement q(db_,
              "INSERT INTO progress (job_id, at_ms, iterations, loss) VALUES (?1, ?2, ?3, ?4)");
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  q.Int(2, point.at_ms);
  q.Real(3, point.iterations);
  q.Real(4, point.loss);
  return q.Run("writing progress");
}

absl::StatusOr<std::vector<ProgressRecord>> JobStore::Progress(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "SELECT at_ms, iterations, loss FROM progress WHERE job_id = ?1 ORDER BY rowid");
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  std::vector<ProgressRecord> out;
  while (true) {
    auto row = q.Step("reading progress");
    if (!row.ok()) return row.status();
    if (!*row) return out;
    out.push_back(
        {.at_ms = q.ColumnInt(0), .iterations = q.ColumnReal(1), .loss = q.ColumnReal(2)});
  }
}

}  // namespace spotdnn::job
