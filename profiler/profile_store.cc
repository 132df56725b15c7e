#include "profiler/profile_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "services/common/db/sqlite.h"

namespace spotdnn::profiler {
namespace {

using sql::SqlError;
using sql::Statement;
using sql::Transaction;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  job_id TEXT PRIMARY KEY,
  source TEXT NOT NULL,
  created_unix_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
  job_id TEXT NOT NULL REFERENCES runs(job_id) ON DELETE CASCADE,
  worker_id TEXT NOT NULL,
  instance_type TEXT NOT NULL,
  gpu_type TEXT NOT NULL,
  gpus INTEGER NOT NULL CHECK (gpus >= 0),
  batch_size INTEGER NOT NULL CHECK (batch_size >= 0),
  step INTEGER NOT NULL CHECK (step >= 0),
  wall_time_s REAL NOT NULL CHECK (wall_time_s >= 0),
  iteration_time_s REAL NOT NULL CHECK (iteration_time_s >= 0),
  loss REAL NOT NULL CHECK (loss >= 0),
  bytes_sent INTEGER NOT NULL CHECK (bytes_sent >= 0),
  bytes_received INTEGER NOT NULL CHECK (bytes_received >= 0),
  gpu_memory_gib REAL NOT NULL CHECK (gpu_memory_gib >= 0),
  cluster_workers INTEGER NOT NULL CHECK (cluster_workers >= 0),
  communication_time_s REAL NOT NULL CHECK (communication_time_s >= 0),
  cluster_steps_per_s REAL NOT NULL CHECK (cluster_steps_per_s >= 0),
  accuracy REAL NOT NULL DEFAULT 0,
  parameter_servers INTEGER NOT NULL DEFAULT 0,
  cluster TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS profiles (
  name TEXT NOT NULL,
  version INTEGER NOT NULL CHECK (version >= 1),
  json TEXT NOT NULL,
  created_unix_s REAL NOT NULL,
  PRIMARY KEY (name, version)
);
)sql";

double NowUnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Columns added to `samples` after its first release: a database made before gets them here.
constexpr std::pair<const char*, const char*> kAddedSampleColumns[] = {
    {"accuracy", "REAL NOT NULL DEFAULT 0"},
    {"parameter_servers", "INTEGER NOT NULL DEFAULT 0"},
    {"cluster", "TEXT NOT NULL DEFAULT ''"}};

absl::Status AddMissingColumns(sqlite3* db) {
  std::set<std::string> have;
  Statement info(db, "PRAGMA table_info(samples)");
  if (!info.status().ok()) return info.status();
  while (true) {
    auto row = info.Step("reading the samples table's columns");
    if (!row.ok()) return row.status();
    if (!*row) break;
    have.insert(info.ColumnText(1));
  }
  for (const auto& [name, type] : kAddedSampleColumns) {
    if (have.count(name)) continue;
    const std::string sql = absl::StrCat("ALTER TABLE samples ADD COLUMN ", name, " ", type);
    if (auto s = sql::Exec(db, sql.c_str()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// One sample per (job, worker, step): the key that makes storing idempotent. Step 0 is what a
// sample without a step number has (a memory measurement, a CSV row without a step column), so
// such samples are told apart by all their fields instead (the added columns too): only an
// identical one is a resend. A database made before the keys existed loses its duplicate rows,
// the first kept, when they are added (after AddMissingColumns). The keys are also the indexes by
// job, one per row as before: they are partial, so the queries by job ask for "step > 0" and
// "step = 0" separately (SQLite uses a partial index only for a query whose WHERE implies the
// index's). samples_without_step was an earlier field key without the added columns.
constexpr char kSampleKey[] = R"sql(
BEGIN IMMEDIATE;
DELETE FROM samples WHERE step > 0 AND rowid NOT IN
  (SELECT MIN(rowid) FROM samples WHERE step > 0 GROUP BY job_id, worker_id, step);
DELETE FROM samples WHERE step = 0 AND rowid NOT IN
  (SELECT MIN(rowid) FROM samples WHERE step = 0 GROUP BY job_id, worker_id, instance_type,
   gpu_type, gpus, batch_size, wall_time_s, iteration_time_s, loss, bytes_sent, bytes_received,
   gpu_memory_gib, cluster_workers, communication_time_s, cluster_steps_per_s, accuracy,
   parameter_servers, cluster);
CREATE UNIQUE INDEX IF NOT EXISTS samples_by_key ON samples (job_id, worker_id, step)
  WHERE step > 0;
CREATE UNIQUE INDEX IF NOT EXISTS samples_by_fields ON samples (job_id, worker_id,
  instance_type, gpu_type, gpus, batch_size, wall_time_s, iteration_time_s, loss, bytes_sent,
  bytes_received, gpu_memory_gib, cluster_workers, communication_time_s, cluster_steps_per_s,
  accuracy, parameter_servers, cluster)
  WHERE step = 0;
DROP INDEX IF EXISTS samples_without_step;
DROP INDEX IF EXISTS samples_by_job;
COMMIT;
)sql";

}  // namespace

absl::StatusOr<std::unique_ptr<ProfileStore>> ProfileStore::Open(const std::string& path) {
  absl::StatusOr<sqlite3*> db = sql::OpenDatabase(path, "db", kSchema);
  if (!db.ok()) return db.status();
  std::unique_ptr<ProfileStore> store(new ProfileStore(*db));
  absl::MutexLock lock(&store->mu_);
  if (auto s = AddMissingColumns(store->db_); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("db = \"", path, "\": ", s.message()));
  }
  Statement has_key(
      store->db_,
      "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'samples_by_fields'");
  if (!has_key.status().ok()) return has_key.status();
  auto row = has_key.Step("looking for the sample key");
  if (!row.ok()) return row.status();
  if (!*row) {
    if (auto s = store->Exec(kSampleKey); !s.ok()) {
      (void)store->Exec("ROLLBACK");
      return absl::UnavailableError(absl::StrCat("db = \"", path, "\": ", s.message()));
    }
  }
  return store;
}

ProfileStore::~ProfileStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status ProfileStore::Exec(const char* sql) { return sql::Exec(db_, sql); }

absl::StatusOr<std::uint64_t> ProfileStore::AddSamples(absl::Span<const Sample> samples,
                                                       const std::string& source) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (auto s = ValidateSample(samples[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("samples[", i, "]: ", s.message()));
    }
  }
  if (samples.empty()) return 0;
  absl::MutexLock lock(&mu_);
  Transaction txn(db_);
  if (!txn.status().ok()) return txn.status();
  Statement run(db_,
                "INSERT INTO runs (job_id, source, created_unix_s) VALUES (?1, ?2, ?3) "
                "ON CONFLICT (job_id) DO NOTHING");
  Statement insert(db_,
                   "INSERT INTO samples (job_id, worker_id, instance_type, gpu_type, gpus, "
                   "batch_size, step, wall_time_s, iteration_time_s, loss, bytes_sent, "
                   "bytes_received, gpu_memory_gib, cluster_workers, communication_time_s, "
                   "cluster_steps_per_s, accuracy, parameter_servers, cluster) VALUES (?1, ?2, "
                   "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) "
                   "ON CONFLICT DO NOTHING");
  if (!run.status().ok()) return run.status();
  if (!insert.status().ok()) return insert.status();
  const double now = NowUnixSeconds();
  std::uint64_t stored = 0;
  const std::string* last_job = nullptr;
  std::set<std::string> jobs;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if ((last_job == nullptr || *last_job != s.job_id) && jobs.insert(s.job_id).second) {
      run.Text(1, s.job_id);
      run.Text(2, source);
      run.Real(3, now);
      if (auto done = run.Step("recording a run"); !done.ok()) return done.status();
      run.Reset();
    }
    last_job = &s.job_id;
    insert.Text(1, s.job_id);
    insert.Text(2, s.worker_id);
    insert.Text(3, s.instance_type);
    insert.Text(4, s.gpu_type);
    insert.Int(5, s.gpus);
    insert.Int(6, s.batch_size);
    insert.Int(7, s.step);
    insert.Real(8, s.wall_time_s);
    insert.Real(9, s.iteration_time_s);
    insert.Real(10, s.loss);
    insert.Int(11, s.bytes_sent);
    insert.Int(12, s.bytes_received);
    insert.Real(13, s.gpu_memory_gib);
    insert.Int(14, s.cluster_workers);
    insert.Real(15, s.communication_time_s);
    insert.Real(16, s.cluster_steps_per_s);
    insert.Real(17, s.accuracy);
    insert.Int(18, s.parameter_servers);
    insert.Text(19, s.cluster);
    if (auto done = insert.Step("storing samples"); !done.ok()) {
      return absl::Status(done.status().code(),
                          absl::StrCat("samples[", i, "]: ", done.status().message()));
    }
    stored += sqlite3_changes(db_);
    insert.Reset();
  }
  if (auto s = txn.Commit(); !s.ok()) return s;
  return stored;
}

absl::StatusOr<std::vector<Sample>> ProfileStore::LoadSamples(
    absl::Span<const std::string> job_ids) {
  absl::MutexLock lock(&mu_);
  constexpr char kColumns[] =
      "SELECT job_id, worker_id, instance_type, gpu_type, gpus, batch_size, step, wall_time_s, "
      "iteration_time_s, loss, bytes_sent, bytes_received, gpu_memory_gib, cluster_workers, "
      "communication_time_s, cluster_steps_per_s, accuracy, parameter_servers, cluster FROM "
      "samples";
  // The same and the rowid, for a compound SELECT to sort by (its 20th column).
  constexpr char kColumnsAndRowid[] =
      "SELECT job_id, worker_id, instance_type, gpu_type, gpus, batch_size, step, wall_time_s, "
      "iteration_time_s, loss, bytes_sent, bytes_received, gpu_memory_gib, cluster_workers, "
      "communication_time_s, cluster_steps_per_s, accuracy, parameter_servers, cluster, rowid "
      "FROM samples";
  std::vector<Sample> out;
  // Jobs an earlier entry of job_ids already read (a job and one of its runs both named).
  std::set<std::string> done, reading;
  auto read = [&](Statement& q) -> absl::Status {
    while (true) {
      auto row = q.Step("reading samples");
      if (!row.ok()) return row.status();
      if (!*row) {
        done.insert(reading.begin(), reading.end());
        reading.clear();
        return absl::OkStatus();
      }
      sqlite3_stmt* st = q.get();
      Sample s;
      s.job_id = q.ColumnText(0);
      if (done.count(s.job_id)) continue;
      reading.insert(s.job_id);
      s.worker_id = q.ColumnText(1);
      s.instance_type = q.ColumnText(2);
      s.gpu_type = q.ColumnText(3);
      s.gpus = sqlite3_column_int(st, 4);
      s.batch_size = sqlite3_column_int(st, 5);
      s.step = sqlite3_column_int64(st, 6);
      s.wall_time_s = sqlite3_column_double(st, 7);
      s.iteration_time_s = sqlite3_column_double(st, 8);
      s.loss = sqlite3_column_double(st, 9);
      s.bytes_sent = sqlite3_column_int64(st, 10);
      s.bytes_received = sqlite3_column_int64(st, 11);
      s.gpu_memory_gib = sqlite3_column_double(st, 12);
      s.cluster_workers = sqlite3_column_int(st, 13);
      s.communication_time_s = sqlite3_column_double(st, 14);
      s.cluster_steps_per_s = sqlite3_column_double(st, 15);
      s.accuracy = sqlite3_column_double(st, 16);
      s.parameter_servers = sqlite3_column_int(st, 17);
      s.cluster = q.ColumnText(18);
      out.push_back(std::move(s));
    }
  };
  // One read transaction: a consistent snapshot while writers carry on (WAL).
  if (auto s = Exec("BEGIN"); !s.ok()) return s;
  absl::Status status;
  if (job_ids.empty()) {
    Statement q(db_, absl::StrCat(kColumns, " ORDER BY rowid").c_str());
    status = q.status().ok() ? read(q) : q.status();
  } else {
    // A job id names that job and the runs an import split it into ("J/run-3", "J/zone/run-1"):
    // the ids from "J/" up to "J0" ('0' follows '/'). Each part through one of the two keys, the
    // indexes by job (see kSampleKey).
    std::string sql;
    for (const char* job : {"job_id = ?1", "job_id >= ?1 || '/' AND job_id < ?1 || '0'"}) {
      for (const char* step : {"step > 0", "step = 0"}) {
        absl::StrAppend(&sql, sql.empty() ? "" : " UNION ALL ", kColumnsAndRowid, " WHERE ", job,
                        " AND ", step);
      }
    }
    Statement q(db_, absl::StrCat(sql, " ORDER BY 20").c_str());
    status = q.status();
    for (const std::string& job : job_ids) {
      if (!status.ok()) break;
      q.Text(1, job);
      status = read(q);
      q.Reset();
    }
  }
  (void)Exec("COMMIT");
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<StoredRun>> ProfileStore::ListRuns() {
  absl::MutexLock lock(&mu_);
  Statement q(
      db_,
      "SELECT r.job_id, r.source, (SELECT COUNT(*) FROM samples s WHERE step > 0 AND "
      "s.job_id = r.job_id) + (SELECT COUNT(*) FROM samples s WHERE step = 0 AND s.job_id = "
      "r.job_id) FROM runs r ORDER BY r.job_id");
  if (!q.status().ok()) return q.status();
  std::vector<StoredRun> out;
  while (true) {
    auto row = q.Step("listing runs");
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back({q.ColumnText(0), q.ColumnText(1), sqlite3_column_int64(q.get(), 2)});
  }
  return out;
}

absl::StatusOr<std::int64_t> ProfileStore::CountSamples(absl::Span<const std::string> job_ids) {
  // The ids LoadSamples would read, each once: an id named before, or a run ("J/...") of another
  // id named, adds nothing.
  const std::set<absl::string_view> named(job_ids.begin(), job_ids.end());
  std::vector<absl::string_view> ids;
  for (absl::string_view id : named) {
    bool covered = false;
    for (size_t slash = id.find('/'); slash != absl::string_view::npos && !covered;
         slash = id.find('/', slash + 1)) {
      covered = named.count(id.substr(0, slash)) > 0;
    }
    if (!covered) ids.push_back(id);
  }
  absl::MutexLock lock(&mu_);
  // Each part through one of the two keys (see kSampleKey).
  Statement q(db_, job_ids.empty()
                       ? "SELECT COUNT(*) FROM samples"
                       : "SELECT (SELECT COUNT(*) FROM samples WHERE job_id = ?1 AND step > 0) + "
                         "(SELECT COUNT(*) FROM samples WHERE job_id = ?1 AND step = 0) + "
                         "(SELECT COUNT(*) FROM samples WHERE job_id >= ?1 || '/' AND job_id < ?1 "
                         "|| '0' AND step > 0) + (SELECT COUNT(*) FROM samples WHERE job_id >= ?1 "
                         "|| '/' AND job_id < ?1 || '0' AND step = 0)");
  if (!q.status().ok()) return q.status();
  std::int64_t count = 0;
  for (size_t i = 0; i < (job_ids.empty() ? 1 : ids.size()); ++i) {
    const std::string id = job_ids.empty() ? std::string() : std::string(ids[i]);
    if (!job_ids.empty()) q.Text(1, id);  // bound without a copy: `id` outlives the step
    auto row = q.Step("counting samples");
    if (!row.ok()) return row.status();
    count += sqlite3_column_int64(q.get(), 0);
    q.Reset();
  }
  return count;
}

absl::StatusOr<std::vector<WorkerProgress>> ProfileStore::JobProgress(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  // SQLite takes the bare columns of a MAX() aggregate from the row holding the maximum. The
  // job's rows come through its two keys (see kSampleKey).
  Statement q(db_,
              "SELECT worker_id, instance_type, MAX(step), COUNT(*), MAX(wall_time_s), loss FROM "
              "(SELECT worker_id, instance_type, step, wall_time_s, loss FROM samples WHERE "
              "job_id = ?1 AND step > 0 UNION ALL SELECT worker_id, instance_type, step, "
              "wall_time_s, loss FROM samples WHERE job_id = ?1 AND step = 0) "
              "GROUP BY worker_id ORDER BY worker_id");
  if (!q.status().ok()) return q.status();
  q.Text(1, job_id);
  std::vector<WorkerProgress> out;
  while (true) {
    auto row = q.Step("reading a job's progress");
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back({.worker_id = q.ColumnText(0),
                   .instance_type = q.ColumnText(1),
                   .steps = sqlite3_column_int64(q.get(), 2),
                   .samples = sqlite3_column_int64(q.get(), 3),
                   .last_wall_time_s = sqlite3_column_double(q.get(), 4),
                   .last_loss = sqlite3_column_double(q.get(), 5)});
  }
  return out;
}

absl::StatusOr<int> ProfileStore::PutProfile(
    const std::string& name, const std::function<std::string(int version)>& document) {
  if (name.empty()) return absl::InvalidArgumentError("name is empty: a profile needs a name");
  absl::MutexLock lock(&mu_);
  Transaction txn(db_);
  if (!txn.status().ok()) return txn.status();
  Statement next(db_, "SELECT COALESCE(MAX(version), 0) + 1 FROM profiles WHERE name = ?1");
  if (!next.status().ok()) return next.status();
  next.Text(1, name);
  auto row = next.Step("numbering the profile");
  if (!row.ok()) return row.status();
  const int version = sqlite3_column_int(next.get(), 0);
  const std::string json = document(version);
  Statement insert(db_,
                   "INSERT INTO profiles (name, version, json, created_unix_s) "
                   "VALUES (?1, ?2, ?3, ?4)");
  if (!insert.status().ok()) return insert.status();
  insert.Text(1, name);
  insert.Int(2, version);
  insert.Text(3, json);
  insert.Real(4, NowUnixSeconds());
  if (auto done = insert.Step("storing the profile"); !done.ok()) return done.status();
  if (auto s = txn.Commit(); !s.ok()) return s;
  return version;
}

absl::StatusOr<StoredProfile> ProfileStore::GetProfile(const std::string& name, int version) {
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version = ", version, ": must be >= 0"));
  }
  absl::MutexLock lock(&mu_);
  Statement q(db_, version == 0
                       ? "SELECT name, version, json, created_unix_s FROM profiles WHERE name = ?1 "
                         "ORDER BY version DESC LIMIT 1"
                       : "SELECT name, version, json, created_unix_s FROM profiles WHERE name = ?1 "
                         "AND version = ?2");
  if (!q.status().ok()) return q.status();
  q.Text(1, name);
  if (version != 0) q.Int(2, version);
  auto row = q.Step("reading the profile");
  if (!row.ok()) return row.status();
  if (!*row) {
    return absl::NotFoundError(
        version == 0 ? absl::StrCat("profile \"", name, "\" is not stored")
                     : absl::StrCat("profile \"", name, "\" has no version ", version));
  }
  return StoredProfile{q.ColumnText(0), sqlite3_column_int(q.get(), 1), q.ColumnText(2),
                       sqlite3_column_double(q.get(), 3)};
}

absl::StatusOr<std::vector<StoredProfile>> ProfileStore::ListProfiles() {
  absl::MutexLock lock(&mu_);
  Statement q(db_,
              "SELECT p.name, p.version, p.json, p.created_unix_s FROM profiles p WHERE p.version "
              "= (SELECT MAX(version) FROM profiles q WHERE q.name = p.name) ORDER BY p.name");
  if (!q.status().ok()) return q.status();
  std::vector<StoredProfile> out;
  while (true) {
    auto row = q.Step("listing profiles");
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back({q.ColumnText(0), sqlite3_column_int(q.get(), 1), q.ColumnText(2),
                   sqlite3_column_double(q.get(), 3)});
  }
  return out;
}

absl::StatusOr<int> ProfileStore::DeleteProfile(const std::string& name, int version) {
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version = ", version, ": must be >= 0"));
  }
  absl::MutexLock lock(&mu_);
  Statement q(db_, version == 0 ? "DELETE FROM profiles WHERE name = ?1"
                                : "DELETE FROM profiles WHERE name = ?1 AND version = ?2");
  if (!q.status().ok()) return q.status();
  q.Text(1, name);
  if (version != 0) q.Int(2, version);
  if (auto done = q.Step("deleting the profile"); !done.ok()) return done.status();
  const int deleted = sqlite3_changes(db_);
  if (deleted == 0) {
    return absl::NotFoundError(
        version == 0 ? absl::StrCat("profile \"", name, "\" is not stored")
                     : absl::StrCat("profile \"", name, "\" has no version ", version));
  }
  return deleted;
}

}  // namespace spotdnn::profiler
