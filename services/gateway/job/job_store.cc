#include "services/gateway/job_store.h"

#include <sqlite3.h>

#include <chrono>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/db/sqlite.h"

namespace spotdnn::gateway {
namespace {

using sql::SqlError;
using sql::Statement;

// One column of a record: its name and the member it maps to.
template <typename R>
struct Column {
  const char* name;
  std::variant<std::string R::*, int64_t R::*, double R::*, int R::*> member;
};

template <typename R>
std::string ColumnList(const std::vector<Column<R>>& columns) {
  return absl::StrJoin(columns, ", ",
                       [](std::string* out, const Column<R>& c) { absl::StrAppend(out, c.name); });
}

// Binds every column of `r` to ?1..?N in order.
template <typename R>
void Bind(Statement& q, const std::vector<Column<R>>& columns, const R& r) {
  for (size_t i = 0; i < columns.size(); ++i) {
    const int at = static_cast<int>(i) + 1;
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(r.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            q.Text(at, r.*member);
          } else if constexpr (std::is_same_v<T, double>) {
            q.Real(at, r.*member);
          } else {
            q.Int(at, r.*member);
          }
        },
        columns[i].member);
  }
}

template <typename R>
R Read(Statement& q, const std::vector<Column<R>>& columns) {
  R r;
  for (size_t i = 0; i < columns.size(); ++i) {
    const int at = static_cast<int>(i);
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(r.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            r.*member = q.ColumnText(at);
          } else if constexpr (std::is_same_v<T, double>) {
            r.*member = sqlite3_column_double(q.get(), at);
          } else {
            r.*member = static_cast<T>(sqlite3_column_int64(q.get(), at));
          }
        },
        columns[i].member);
  }
  return r;
}

const std::vector<Column<JobRecord>>& JobColumns() {
  static const auto* columns =
      new std::vector<Column<JobRecord>>{{"id", &JobRecord::id},
                                         {"spec_json", &JobRecord::spec_json},
                                         {"state", &JobRecord::state},
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
                                         {"last_event_seq", &JobRecord::last_event_seq},
                                         {"ps_addresses", &JobRecord::ps_addresses},
                                         {"ps_ports", &JobRecord::ps_ports},
                                         {"next_worker_index", &JobRecord::next_worker_index},
                                         {"takeovers", &JobRecord::takeovers},
                                         {"summary_json", &JobRecord::summary_json}};
  return *columns;
}

const std::vector<Column<InstanceRecord>>& InstanceColumns() {
  static const auto* columns = new std::vector<Column<InstanceRecord>>{
      {"job_id", &InstanceRecord::job_id},
      {"id", &InstanceRecord::id},
      {"role", &InstanceRecord::role},
      {"instance_type", &InstanceRecord::instance_type},
      {"idx", &InstanceRecord::index},
      {"reason", &InstanceRecord::reason},
      {"launch_token", &InstanceRecord::launch_token},
      {"price_per_hour", &InstanceRecord::price_per_hour},
      {"predicted_iteration_s", &InstanceRecord::predicted_iteration_s},
      {"metadata_endpoint", &InstanceRecord::metadata_endpoint},
      {"state", &InstanceRecord::state},
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
      {"status", &RevocationRecord::status},
      {"detail", &RevocationRecord::detail}};
  return *columns;
}

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, spec_json TEXT, state TEXT, message TEXT, created_ms INTEGER,
  started_ms INTEGER, finished_ms INTEGER, workload_json TEXT, catalog_json TEXT, plan_json TEXT,
  target_iterations REAL, predicted_time_s REAL, predicted_cost_usd REAL, iterations_done REAL,
  last_event_seq INTEGER, ps_addresses TEXT, ps_ports TEXT, next_worker_index INTEGER,
  takeovers INTEGER, summary_json TEXT);
CREATE TABLE IF NOT EXISTS instances (
  job_id TEXT NOT NULL REFERENCES jobs(id), id TEXT NOT NULL, role TEXT, instance_type TEXT,
  idx INTEGER, reason TEXT, launch_token TEXT, price_per_hour REAL, predicted_iteration_s REAL,
  metadata_endpoint TEXT, state TEXT, launched_ms INTEGER, ended_ms INTEGER,
  PRIMARY KEY (job_id, id));
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
)sql";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  Bind(q, columns, r);
  auto done = q.Step(absl::StrCat("writing ", table));
  return done.ok() ? absl::OkStatus() : done.status();
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
    out.push_back(Read(q, columns));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  absl::StatusOr<sqlite3*> db = sql::OpenDatabase(path, "job db", kSchema);
  if (!db.ok()) return db.status();
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
    out.push_back(Read(q, JobColumns()));
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
                                const std::string& detail) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "INSERT INTO events (job_id, at_ms, kind, detail) VALUES (?1, ?2, ?3, ?4)");
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  q.Int(2, NowMs());
  q.Text(3, kind);
  q.Text(4, detail);
  auto done = q.Step("writing events");
  return done.ok() ? absl::OkStatus() : done.status();
}

absl::StatusOr<std::vector<JobEventRecord>> JobStore::Events(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  static const auto* columns =
      new std::vector<Column<JobEventRecord>>{{"at_ms", &JobEventRecord::at_ms},
                                              {"kind", &JobEventRecord::kind},
                                              {"detail", &JobEventRecord::detail}};
  return SelectForJob(db_, "events", "job_id", *columns, job_id);
}

}  // namespace spotdnn::gateway
