#include "profiler/profile_store.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/db/database.h"

namespace spotdnn::profiler {
namespace {

using db::Row;
using db::Value;

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
  cluster TEXT NOT NULL DEFAULT ''{ROWID}
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

// One sample per (job, worker, step): the key that makes storing idempotent. Step 0 is what a
// sample without a step number has (a memory measurement, a CSV row without a step column), so
// such samples are told apart by all their fields instead (the added columns too): only an
// identical one is a resend. A database made before the keys existed loses its duplicate rows,
// the first kept, when they are added (after the added columns). The keys are also the indexes by
// job, one per row as before: they are partial, so the queries by job ask for "step > 0" and
// "step = 0" separately (SQLite uses a partial index only for a query whose WHERE implies the
// index's). samples_without_step was an earlier field key without the added columns.
constexpr char kSampleKey[] = R"sql(
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
)sql";

// Version 1: the schema as of the first versioned release, made from nothing or from any
// database an earlier release wrote (they recorded no version).
absl::Status SchemaV1(db::Database& db) {
  if (absl::Status s = db.ExecDdl(kSchema); !s.ok()) return s;
  for (const auto& [name, type] : kAddedSampleColumns) {
    if (absl::Status s = db.AddColumnIfMissing("samples", name, type); !s.ok()) return s;
  }
  return db.ExecDdl(kSampleKey);
}

// Version 2: Sample.metrics, as "NAME=VALUE,NAME=VALUE" (names never hold '=' or ','; values
// with 17 significant digits, so they read back exactly); '' for none.
absl::Status SchemaV2(db::Database& db) {
  return db.AddColumnIfMissing("samples", "metrics", "TEXT NOT NULL DEFAULT ''");
}

// Version 3: Sample.placement, the GPUs per instance of a synchronous run; '' for none.
absl::Status SchemaV3(db::Database& db) {
  return db.AddColumnIfMissing("samples", "placement", "TEXT NOT NULL DEFAULT ''");
}

const db::Migration kMigrations[] = {{1, SchemaV1}, {2, SchemaV2}, {3, SchemaV3}};

std::string MetricsText(const std::map<std::string, double>& metrics) {
  std::string out;
  for (const auto& [name, value] : metrics) {
    absl::StrAppend(&out, out.empty() ? "" : ",", name, "=", absl::StrFormat("%.17g", value));
  }
  return out;
}

// The metrics column back (entries that do not parse, which this store never writes, are left
// out).
std::map<std::string, double> MetricsOf(absl::string_view text) {
  std::map<std::string, double> out;
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const size_t eq = part.rfind('=');
    double value = 0;
    if (eq == absl::string_view::npos || !absl::SimpleAtod(part.substr(eq + 1), &value)) continue;
    out[std::string(part.substr(0, eq))] = value;
  }
  return out;
}

constexpr char kSampleColumns[] =
    "job_id, worker_id, instance_type, gpu_type, gpus, batch_size, step, wall_time_s, "
    "iteration_time_s, loss, bytes_sent, bytes_received, gpu_memory_gib, cluster_workers, "
    "communication_time_s, cluster_steps_per_s, accuracy, parameter_servers, cluster, metrics, "
    "placement";

constexpr size_t kSampleColumnCount = 21;

// Samples go in with multi-row INSERTs of kRowsPerInsert rows, then halves of it down to one for
// the rest of a batch: one round trip per 256 samples, and at most nine statement texts for a
// connection to prepare. 256 rows of 21 columns stay under both backends' parameter limits.
constexpr size_t kRowsPerInsert = 256;

// The INSERT of `rows` samples (a power of two up to kRowsPerInsert), made once per size.
const std::string& InsertSamples(size_t rows) {
  static const auto* const statements = [] {
    auto* out = new std::vector<std::string>;
    for (size_t n = 1; n <= kRowsPerInsert; n *= 2) {
      out->push_back(absl::StrCat("INSERT INTO samples (", kSampleColumns, ") VALUES ",
                                  db::ValuesRows(kSampleColumnCount, n),
                                  " ON CONFLICT DO NOTHING"));
    }
    return out;
  }();
  size_t index = 0;
  while ((size_t{1} << index) < rows) ++index;
  return (*statements)[index];
}

// A sample's values in kSampleColumns' order.
void AppendColumns(const Sample& s, std::vector<Value>& out) {
  out.emplace_back(s.job_id);
  out.emplace_back(s.worker_id);
  out.emplace_back(s.instance_type);
  out.emplace_back(s.gpu_type);
  out.emplace_back(std::int64_t{s.gpus});
  out.emplace_back(std::int64_t{s.batch_size});
  out.emplace_back(s.step);
  out.emplace_back(s.wall_time_s);
  out.emplace_back(s.iteration_time_s);
  out.emplace_back(s.loss);
  out.emplace_back(s.bytes_sent);
  out.emplace_back(s.bytes_received);
  out.emplace_back(s.gpu_memory_gib);
  out.emplace_back(std::int64_t{s.cluster_workers});
  out.emplace_back(s.communication_time_s);
  out.emplace_back(s.cluster_steps_per_s);
  out.emplace_back(s.accuracy);
  out.emplace_back(std::int64_t{s.parameter_servers});
  out.emplace_back(s.cluster);
  out.emplace_back(MetricsText(s.metrics));
  out.emplace_back(s.placement);
}

Sample SampleOf(const Row& r) {
  Sample s;
  s.job_id = r.Text(0);
  s.worker_id = r.Text(1);
  s.instance_type = r.Text(2);
  s.gpu_type = r.Text(3);
  s.gpus = static_cast<int>(r.Int(4));
  s.batch_size = static_cast<int>(r.Int(5));
  s.step = r.Int(6);
  s.wall_time_s = r.Real(7);
  s.iteration_time_s = r.Real(8);
  s.loss = r.Real(9);
  s.bytes_sent = r.Int(10);
  s.bytes_received = r.Int(11);
  s.gpu_memory_gib = r.Real(12);
  s.cluster_workers = static_cast<int>(r.Int(13));
  s.communication_time_s = r.Real(14);
  s.cluster_steps_per_s = r.Real(15);
  s.accuracy = r.Real(16);
  s.parameter_servers = static_cast<int>(r.Int(17));
  s.cluster = r.Text(18);
  s.metrics = MetricsOf(r.Text(19));
  s.placement = r.Text(20);
  return s;
}

StoredProfile ProfileOf(const Row& r) {
  return {r.Text(0), static_cast<int>(r.Int(1)), r.Text(2), r.Real(3)};
}

absl::Status NoSuchProfile(const std::string& name, int version) {
  return absl::NotFoundError(version == 0
                                 ? absl::StrCat("profile \"", name, "\" is not stored")
                                 : absl::StrCat("profile \"", name, "\" has no version ", version));
}

}  // namespace

ProfileStore::ProfileStore(std::unique_ptr<db::Database> db) : db_(std::move(db)) {}

absl::StatusOr<std::unique_ptr<ProfileStore>> ProfileStore::Open(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<db::Database>> db =
      db::OpenStore(spec, "store", "spotdnn_profiler", kMigrations);
  if (!db.ok()) return db.status();
  return std::unique_ptr<ProfileStore>(new ProfileStore(*std::move(db)));
}

ProfileStore::~ProfileStore() = default;

absl::StatusOr<std::uint64_t> ProfileStore::AddSamples(absl::Span<const Sample> samples,
                                                       const std::string& source) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (auto s = ValidateSample(samples[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("samples[", i, "]: ", s.message()));
    }
  }
  if (samples.empty()) return 0;
  absl::MutexLock lock(&mu_);
  const double now = NowUnixSeconds();
  std::uint64_t stored = 0;
  std::vector<Value> params;
  params.reserve(std::min(samples.size(), kRowsPerInsert) * kSampleColumnCount);
  absl::Status status = db_->Write([&]() -> absl::Status {
    stored = 0;
    // Each job's run first (the samples' foreign key), once per job.
    std::set<std::string> jobs;
    const std::string* last_job = nullptr;
    for (const Sample& s : samples) {
      if ((last_job == nullptr || *last_job != s.job_id) && jobs.insert(s.job_id).second) {
        auto done = db_->Exec(
            "INSERT INTO runs (job_id, source, created_unix_s) VALUES (?1, ?2, ?3) "
            "ON CONFLICT (job_id) DO NOTHING",
            {s.job_id, source, now});
        if (!done.ok()) return done.status();
      }
      last_job = &s.job_id;
    }
    // Then the samples, up to kRowsPerInsert in a statement, in their order: a repeat within
    // the batch conflicts with the row stored before it in the same statement or an earlier one,
    // so the first is kept, as row by row.
    for (size_t begin = 0; begin < samples.size();) {
      size_t rows = kRowsPerInsert;
      while (rows > samples.size() - begin) rows /= 2;
      params.clear();
      for (size_t i = begin; i < begin + rows; ++i) {
        AppendColumns(samples[i], params);
      }
      auto done = db_->Exec(InsertSamples(rows), params);
      if (!done.ok()) {
        return absl::Status(
            done.status().code(),
            absl::StrCat(rows == 1 ? absl::StrCat("samples[", begin, "]")
                                   : absl::StrCat("samples[", begin, "..", begin + rows - 1, "]"),
                         ": ", done.status().message()));
      }
      stored += static_cast<std::uint64_t>(*done);
      begin += rows;
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return stored;
}

absl::StatusOr<std::vector<Sample>> ProfileStore::LoadSamples(
    absl::Span<const std::string> job_ids) {
  absl::MutexLock lock(&mu_);
  std::vector<Sample> out;
  // Jobs an earlier entry of job_ids already read (a job and one of its runs both named).
  std::set<std::string> done, reading;
  auto read = [&](const Row& row) -> absl::Status {
    std::string job = row.Text(0);
    if (done.count(job)) return absl::OkStatus();
    reading.insert(std::move(job));
    out.push_back(SampleOf(row));
    return absl::OkStatus();
  };
  // One read transaction: a consistent snapshot while writers carry on.
  absl::Status status = db_->Read([&]() -> absl::Status {
    out.clear();
    done.clear();
    reading.clear();
    if (job_ids.empty()) {
      static const std::string kAll =
          absl::StrCat("SELECT ", kSampleColumns, " FROM samples ORDER BY rowid");
      return db_->Query(kAll, {}, read);
    }
    // A job id names that job and the runs an import split it into ("J/run-3", "J/zone/run-1"):
    // the ids from "J/" up to "J0" ('0' follows '/'). Each part through one of the two keys, the
    // indexes by job (see kSampleKey), the rowid (the 21st column) to sort by.
    static const std::string kByJob = [] {
      std::string sql;
      for (const char* job : {"job_id = ?1", "job_id >= ?1 || '/' AND job_id < ?1 || '0'"}) {
        for (const char* step : {"step > 0", "step = 0"}) {
          absl::StrAppend(&sql, sql.empty() ? "" : " UNION ALL ", "SELECT ", kSampleColumns,
                          ", rowid FROM samples WHERE ", job, " AND ", step);
        }
      }
      return absl::StrCat(sql, " ORDER BY 21");
    }();
    for (const std::string& job : job_ids) {
      if (absl::Status s = db_->Query(kByJob, {job}, read); !s.ok()) return s;
      done.insert(reading.begin(), reading.end());
      reading.clear();
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<StoredRun>> ProfileStore::ListRuns() {
  absl::MutexLock lock(&mu_);
  auto rows = db_->QueryAll(
      "SELECT r.job_id, r.source, (SELECT COUNT(*) FROM samples s WHERE step > 0 AND "
      "s.job_id = r.job_id) + (SELECT COUNT(*) FROM samples s WHERE step = 0 AND s.job_id = "
      "r.job_id) FROM runs r ORDER BY r.job_id");
  if (!rows.ok()) return rows.status();
  std::vector<StoredRun> out;
  for (const Row& r : *rows) out.push_back({r.Text(0), r.Text(1), r.Int(2)});
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
  if (job_ids.empty()) {
    auto row = db_->QueryOne("SELECT COUNT(*) FROM samples");
    if (!row.ok()) return row.status();
    return (*row)->Int(0);
  }
  std::int64_t count = 0;
  for (absl::string_view id : ids) {
    // Each part through one of the two keys (see kSampleKey).
    auto row = db_->QueryOne(
        "SELECT (SELECT COUNT(*) FROM samples WHERE job_id = ?1 AND step > 0) + "
        "(SELECT COUNT(*) FROM samples WHERE job_id = ?1 AND step = 0) + "
        "(SELECT COUNT(*) FROM samples WHERE job_id >= ?1 || '/' AND job_id < ?1 "
        "|| '0' AND step > 0) + (SELECT COUNT(*) FROM samples WHERE job_id >= ?1 "
        "|| '/' AND job_id < ?1 || '0' AND step = 0)",
        {std::string(id)});
    if (!row.ok()) return row.status();
    count += (*row)->Int(0);
  }
  return count;
}

absl::StatusOr<std::vector<WorkerProgress>> ProfileStore::JobProgress(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  // Per worker: the instance type and loss of its highest step (the latest such row), its number
  // of samples, its latest wall time, its lowest numbered step and earliest wall time. The job's
  // rows come through its two keys (see kSampleKey).
  auto rows = db_->QueryAll(
      "SELECT worker_id, instance_type, step, n, wall, loss, first_step, first_wall FROM (SELECT "
      "worker_id, instance_type, step, loss, COUNT(*) OVER w AS n, MAX(wall_time_s) OVER w AS "
      "wall, COALESCE(MIN(CASE WHEN step > 0 THEN step END) OVER w, 0) AS first_step, "
      "COALESCE(MIN(CASE WHEN wall_time_s > 0 THEN wall_time_s END) OVER w, 0) AS first_wall, "
      "ROW_NUMBER() OVER (PARTITION BY worker_id ORDER BY step DESC, rowid DESC) AS r FROM "
      "(SELECT worker_id, instance_type, step, wall_time_s, loss, rowid FROM samples WHERE "
      "job_id = ?1 AND step > 0 UNION ALL SELECT worker_id, instance_type, step, wall_time_s, "
      "loss, rowid FROM samples WHERE job_id = ?1 AND step = 0) AS s "
      "WINDOW w AS (PARTITION BY worker_id)) AS ranked WHERE r = 1 ORDER BY worker_id",
      {job_id});
  if (!rows.ok()) return rows.status();
  std::vector<WorkerProgress> out;
  for (const Row& r : *rows) {
    out.push_back({.worker_id = r.Text(0),
                   .instance_type = r.Text(1),
                   .steps = r.Int(2),
                   .samples = r.Int(3),
                   .last_wall_time_s = r.Real(4),
                   .last_loss = r.Real(5),
                   .first_step = r.Int(6),
                   .first_wall_time_s = r.Real(7)});
  }
  return out;
}

absl::StatusOr<int> ProfileStore::PutProfile(
    const std::string& name, const std::function<std::string(int version)>& document) {
  if (name.empty()) return absl::InvalidArgumentError("name is empty: a profile needs a name");
  absl::MutexLock lock(&mu_);
  int version = 0;
  absl::Status status = db_->Write([&]() -> absl::Status {
    auto next =
        db_->QueryOne("SELECT COALESCE(MAX(version), 0) + 1 FROM profiles WHERE name = ?1", {name});
    if (!next.ok()) return next.status();
    version = static_cast<int>((*next)->Int(0));
    return db_
        ->Exec("INSERT INTO profiles (name, version, json, created_unix_s) VALUES (?1, ?2, ?3, ?4)",
               {name, version, document(version), NowUnixSeconds()})
        .status();
  });
  if (!status.ok()) return status;
  return version;
}

absl::StatusOr<StoredProfile> ProfileStore::GetProfile(const std::string& name, int version) {
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version = ", version, ": must be >= 0"));
  }
  absl::MutexLock lock(&mu_);
  auto row = version == 0
                 ? db_->QueryOne(
                       "SELECT name, version, json, created_unix_s FROM profiles WHERE name = ?1 "
                       "ORDER BY version DESC LIMIT 1",
                       {name})
                 : db_->QueryOne(
                       "SELECT name, version, json, created_unix_s FROM profiles WHERE name = ?1 "
                       "AND version = ?2",
                       {name, version});
  if (!row.ok()) return row.status();
  if (!*row) return NoSuchProfile(name, version);
  return ProfileOf(**row);
}

absl::StatusOr<std::vector<StoredProfile>> ProfileStore::ListProfiles() {
  absl::MutexLock lock(&mu_);
  auto rows = db_->QueryAll(
      "SELECT p.name, p.version, p.json, p.created_unix_s FROM profiles p WHERE p.version "
      "= (SELECT MAX(version) FROM profiles q WHERE q.name = p.name) ORDER BY p.name");
  if (!rows.ok()) return rows.status();
  std::vector<StoredProfile> out;
  for (const Row& r : *rows) out.push_back(ProfileOf(r));
  return out;
}

absl::StatusOr<int> ProfileStore::DeleteProfile(const std::string& name, int version) {
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version = ", version, ": must be >= 0"));
  }
  absl::MutexLock lock(&mu_);
  auto deleted = version == 0 ? db_->Exec("DELETE FROM profiles WHERE name = ?1", {name})
                              : db_->Exec("DELETE FROM profiles WHERE name = ?1 AND version = ?2",
                                          {name, version});
  if (!deleted.ok()) return deleted.status();
  if (*deleted == 0) return NoSuchProfile(name, version);
  return static_cast<int>(*deleted);
}

}  // namespace spotdnn::profiler
