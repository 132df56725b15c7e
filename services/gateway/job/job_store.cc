#include "services/gateway/job/job_store.h"

#include <functional>
#include <tuple>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/db/database.h"

namespace spotdnn::job {
namespace {

using db::Row;
using db::Value;

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

// Every column of `r`, in order (the parameters ?1..?N).
template <typename R>
std::vector<Value> Values(const std::vector<Column<R>>& columns, const R& r) {
  std::vector<Value> values;
  values.reserve(columns.size());
  for (const Column<R>& column : columns) {
    std::visit(
        [&](const auto& member) {
          using M = std::decay_t<decltype(member)>;
          if constexpr (std::is_same_v<M, Named<R>>) {
            values.emplace_back(member.get(r));
          } else {
            using T = std::decay_t<decltype(r.*member)>;
            if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, double>) {
              values.emplace_back(r.*member);
            } else {
              values.emplace_back(static_cast<int64_t>(r.*member));
            }
          }
        },
        column.member);
  }
  return values;
}

template <typename R>
absl::StatusOr<R> Read(const Row& q, const std::vector<Column<R>>& columns) {
  R r;
  absl::Status status;
  for (size_t i = 0; i < columns.size() && status.ok(); ++i) {
    std::visit(
        [&](const auto& member) {
          using M = std::decay_t<decltype(member)>;
          if constexpr (std::is_same_v<M, Named<R>>) {
            status = member.set(r, q.Text(i));
          } else {
            using T = std::decay_t<decltype(r.*member)>;
            if constexpr (std::is_same_v<T, std::string>) {
              r.*member = q.Text(i);
            } else if constexpr (std::is_same_v<T, double>) {
              r.*member = q.Real(i);
            } else {
              r.*member = static_cast<T>(q.Int(i));
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
                                         {"takeovers", &JobRecord::takeovers},
                                         {"worker_losses", &JobRecord::worker_losses},
                                         {"profiling_started_ms", &JobRecord::profiling_started_ms},
                                         {"profiling_s", &JobRecord::profiling_s},
                                         {"profiling_cost_usd", &JobRecord::profiling_cost_usd}};
  return *columns;
}

// An instance's market by name; NULL (a row from before version 3) reads as "": spot, as every
// instance was then.
Named<InstanceRecord> MarketColumn() {
  return {[](const InstanceRecord& r) { return std::string(launcher::MarketName(r.market)); },
          [](InstanceRecord& r, absl::string_view text) -> absl::Status {
            auto market = launcher::ParseMarket(text);
            if (!market.ok()) return absl::DataLossError(market.status().message());
            r.market = *market;
            return absl::OkStatus();
          }};
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
      {"market", MarketColumn()},
      {"state", NamedEnum(&InstanceRecord::state, ParseInstanceStatus)},
      {"launched_ms", &InstanceRecord::launched_ms},
      {"ended_ms", &InstanceRecord::ended_ms},
      {"zone", &InstanceRecord::zone}};
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
  last_event_seq INTEGER, ps_addresses TEXT, next_worker_index INTEGER, takeovers INTEGER{ROWID});
CREATE TABLE IF NOT EXISTS instances (
  job_id TEXT NOT NULL REFERENCES jobs(id), id TEXT NOT NULL, role TEXT, instance_type TEXT,
  idx INTEGER, reason TEXT, launch_token TEXT, price_per_hour REAL, predicted_iteration_s REAL,
  metadata_endpoint TEXT, metadata_cloud TEXT, state TEXT, launched_ms INTEGER,
  ended_ms INTEGER, PRIMARY KEY (job_id, id){ROWID});
CREATE TABLE IF NOT EXISTS revocations (
  job_id TEXT NOT NULL REFERENCES jobs(id), instance_id TEXT NOT NULL, kind TEXT,
  cloud_notice_ms INTEGER, effective_ms INTEGER, received_ms INTEGER, replanned_ms INTEGER,
  replan_json TEXT, takeover_token TEXT, takeover_ids TEXT, takeover_first_index INTEGER,
  takeover_launched_ms INTEGER,
  takeover_reported_ms INTEGER, ended_ms INTEGER, status TEXT, detail TEXT,
  PRIMARY KEY (job_id, instance_id){ROWID});
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL REFERENCES jobs(id), at_ms INTEGER, kind TEXT, detail TEXT{ROWID});
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id);
CREATE TABLE IF NOT EXISTS progress (
  job_id TEXT NOT NULL REFERENCES jobs(id), at_ms INTEGER, iterations REAL, loss REAL{ROWID});
CREATE INDEX IF NOT EXISTS progress_by_job ON progress (job_id);
)sql";

// Version 1: the schema as of the first versioned release, made from nothing or from a job store
// an earlier release wrote (the columns it lacks added).
absl::Status SchemaV1(db::Database& db) {
  if (absl::Status s = db.ExecDdl(kSchema); !s.ok()) return s;
  for (const auto& [table, column, type] :
       {std::tuple{"instances", "metadata_cloud", "TEXT"}, std::tuple{"jobs", "loss", "REAL"},
        std::tuple{"jobs", "steps_lost", "REAL"}}) {
    if (absl::Status s = db.AddColumnIfMissing(table, column, type); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Version 2: what status reports truthfully (the workers' raw last losses) and the profiling
// phase's time and cost.
absl::Status SchemaV2(db::Database& db) {
  for (const auto& [column, type] :
       {std::pair{"worker_losses", "TEXT"}, std::pair{"profiling_started_ms", "INTEGER"},
        std::pair{"profiling_s", "REAL"}, std::pair{"profiling_cost_usd", "REAL"}}) {
    if (absl::Status s = db.AddColumnIfMissing("jobs", column, type); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Version 3: each instance's market (spot or on-demand).
absl::Status SchemaV3(db::Database& db) {
  return db.AddColumnIfMissing("instances", "market", "TEXT");
}

// Version 4: the zone each instance runs in.
absl::Status SchemaV4(db::Database& db) {
  return db.AddColumnIfMissing("instances", "zone", "TEXT");
}

const db::Migration kMigrations[] = {{1, SchemaV1}, {2, SchemaV2}, {3, SchemaV3}, {4, SchemaV4}};

// An INSERT of every column; with `key` (its key columns), one that replaces the row with that
// key (an upsert: the row keeps its place in insertion order).
template <typename R>
absl::Status Insert(db::Database& db, const char* table, const std::vector<Column<R>>& columns,
                    const R& r, absl::string_view key = {}) {
  std::vector<std::string> marks, updates;
  for (size_t i = 1; i <= columns.size(); ++i) marks.push_back(absl::StrCat("?", i));
  for (const Column<R>& c : columns) {
    if (!absl::StrContains(absl::StrCat(", ", key, ", "), absl::StrCat(", ", c.name, ", "))) {
      updates.push_back(absl::StrCat(c.name, " = excluded.", c.name));
    }
  }
  std::string sql = absl::StrCat("INSERT INTO ", table, " (", ColumnList(columns), ") VALUES (",
                                 absl::StrJoin(marks, ", "), ")");
  if (!key.empty()) {
    absl::StrAppend(&sql, " ON CONFLICT (", key, ") DO UPDATE SET ", absl::StrJoin(updates, ", "));
  }
  absl::StatusOr<int64_t> done = db.Exec(sql, Values(columns, r));
  if (!done.ok()) {
    return absl::Status(done.status().code(),
                        absl::StrCat("writing ", table, ": ", done.status().message()));
  }
  return absl::OkStatus();
}

// Rows of `table` (for a job, or all with `job_column` null), in insertion order unless `order`
// says another.
template <typename R>
absl::StatusOr<std::vector<R>> Select(db::Database& db, const char* table, const char* job_column,
                                      const std::vector<Column<R>>& columns,
                                      const std::string& job_id, const char* order = "rowid") {
  const std::string sql =
      absl::StrCat("SELECT ", ColumnList(columns), " FROM ", table,
                   job_column == nullptr ? "" : absl::StrCat(" WHERE ", job_column, " = ?1"),
                   " ORDER BY ", order);
  std::vector<R> out;
  absl::Status status =
      db.Query(sql, job_column == nullptr ? std::vector<Value>{} : std::vector<Value>{job_id},
               [&](const Row& row) -> absl::Status {
                 absl::StatusOr<R> record = Read(row, columns);
                 if (!record.ok()) return record.status();
                 out.push_back(*std::move(record));
                 return absl::OkStatus();
               });
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("reading ", table, ": ", status.message()));
  }
  return out;
}

const std::vector<Column<JobEventRecord>>& EventColumns() {
  static const auto* columns =
      new std::vector<Column<JobEventRecord>>{{"at_ms", &JobEventRecord::at_ms},
                                              {"kind", &JobEventRecord::kind},
                                              {"detail", &JobEventRecord::detail}};
  return *columns;
}

}  // namespace

JobStore::JobStore(std::unique_ptr<db::Database> db) : db_(std::move(db)) {}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<db::Database>> db =
      db::OpenStore(spec, "job store", "spotdnn_jobs", kMigrations);
  if (!db.ok()) return db.status();
  return std::unique_ptr<JobStore>(new JobStore(*std::move(db)));
}

JobStore::~JobStore() = default;

absl::StatusOr<std::unique_ptr<db::HeldLock>> JobStore::HoldJob(const std::string& id,
                                                                const std::string& holder) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<db::LockAttempt> attempt = db_->TryHoldLock(absl::StrCat("job/", id), holder);
  if (!attempt.ok()) return attempt.status();
  if (attempt->lock == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", id, "\" is being run by another gateway",
                     attempt->holder.empty() ? "" : absl::StrCat(" (", attempt->holder, ")"),
                     " that holds its lock in ", db_->where(),
                     ": wait for it, or stop it before `spotdnn run "
                     "--resume ",
                     id, "`"));
  }
  return std::move(attempt->lock);
}

absl::StatusOr<std::optional<std::string>> JobStore::JobHolder(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<db::LockAttempt> attempt =
      db_->TryHoldLock(absl::StrCat("job/", id), "spotdnn status (looking)");
  if (!attempt.ok()) return attempt.status();
  if (attempt->lock != nullptr) return std::optional<std::string>();  // let go here
  return std::optional<std::string>(attempt->holder);
}

absl::Status JobStore::CreateJob(const JobRecord& job) {
  if (job.id.empty()) return absl::InvalidArgumentError("job id is empty");
  absl::MutexLock lock(&mu_);
  absl::Status s = Insert(*db_, "jobs", JobColumns(), job);
  if (absl::IsAlreadyExists(s)) {  // the primary key
    return absl::AlreadyExistsError(
        absl::StrCat("job \"", job.id, "\" already exists: resume it with `spotdnn run --resume ",
                     job.id, "` or give the job another name"));
  }
  return s;
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto rows = Select(*db_, "jobs", "id", JobColumns(), id);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return absl::NotFoundError(absl::StrCat("job \"", id, "\" is not in the job store"));
  }
  return rows->front();
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  return Select(*db_, "jobs", nullptr, JobColumns(), "", "created_ms, id");
}

absl::Status JobStore::UpdateJob(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  auto row = db_->QueryOne("SELECT 1 FROM jobs WHERE id = ?1", {job.id});
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job \"", job.id, "\" is not stored"));
  return Insert(*db_, "jobs", JobColumns(), job, "id");
}

absl::Status JobStore::PutInstance(const InstanceRecord& instance) {
  absl::MutexLock lock(&mu_);
  return Insert(*db_, "instances", InstanceColumns(), instance, "job_id, id");
}

absl::StatusOr<std::vector<InstanceRecord>> JobStore::Instances(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return Select(*db_, "instances", "job_id", InstanceColumns(), job_id);
}

absl::Status JobStore::PutRevocation(const RevocationRecord& revocation) {
  absl::MutexLock lock(&mu_);
  return Insert(*db_, "revocations", RevocationColumns(), revocation, "job_id, instance_id");
}

absl::StatusOr<std::vector<RevocationRecord>> JobStore::Revocations(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return Select(*db_, "revocations", "job_id", RevocationColumns(), job_id);
}

absl::Status JobStore::AddEvent(const std::string& job_id, const std::string& kind,
                                const std::string& detail, int64_t at_ms) {
  absl::MutexLock lock(&mu_);
  auto done = db_->Exec("INSERT INTO events (job_id, at_ms, kind, detail) VALUES (?1, ?2, ?3, ?4)",
                        {job_id, at_ms, kind, detail});
  return done.ok() ? absl::OkStatus() : done.status();
}

absl::StatusOr<std::vector<JobEventRecord>> JobStore::Events(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return Select(*db_, "events", "job_id", EventColumns(), job_id);
}

absl::Status JobStore::AddProgress(const std::string& job_id, const ProgressRecord& point) {
  absl::MutexLock lock(&mu_);
  auto done =
      db_->Exec("INSERT INTO progress (job_id, at_ms, iterations, loss) VALUES (?1, ?2, ?3, ?4)",
                {job_id, point.at_ms, point.iterations, point.loss});
  return done.ok() ? absl::OkStatus() : done.status();
}

absl::StatusOr<std::vector<ProgressRecord>> JobStore::Progress(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto rows = db_->QueryAll(
      "SELECT at_ms, iterations, loss FROM progress WHERE job_id = ?1 ORDER BY rowid", {job_id});
  if (!rows.ok()) return rows.status();
  std::vector<ProgressRecord> out;
  for (const Row& r : *rows) {
    out.push_back({.at_ms = r.Int(0), .iterations = r.Real(1), .loss = r.Real(2)});
  }
  return out;
}

}  // namespace spotdnn::job
