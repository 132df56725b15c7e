#include "detector/detector_store.h"

#include "absl/strings/str_cat.h"
#include "base/db/database.h"

namespace spotdnn::detector {
namespace {

using db::Row;

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS instances (instance_id TEXT PRIMARY KEY, job_id TEXT, "
    "cloud INTEGER, endpoint TEXT, state INTEGER, reason TEXT, last_heartbeat_ms INTEGER, "
    "notice_effective_ms INTEGER);"
    "CREATE TABLE IF NOT EXISTS seen (instance_id TEXT, key TEXT, "
    "PRIMARY KEY (instance_id, key));"
    "CREATE TABLE IF NOT EXISTS events (sequence INTEGER PRIMARY KEY, instance_id TEXT, "
    "job_id TEXT, cloud INTEGER, kind INTEGER, action TEXT, notice_ms INTEGER, "
    "effective_ms INTEGER, detail TEXT);"
    "CREATE TABLE IF NOT EXISTS lifetimes (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "instance_id TEXT, job_id TEXT, instance_type TEXT, started_ms INTEGER, "
    "ended_ms INTEGER, revoked INTEGER, how TEXT);";

// Version 1: the schema as of the first versioned release, made from nothing or from a database
// an earlier release wrote (from before instance types and lifetimes were kept, too).
absl::Status SchemaV1(db::Database& db) {
  if (absl::Status s = db.ExecDdl(kSchema); !s.ok()) return s;
  for (const auto& [column, type] :
       {std::pair{"instance_type", "TEXT"}, std::pair{"registered_ms", "INTEGER"}}) {
    if (absl::Status s = db.AddColumnIfMissing("instances", column, type); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Version 2: what replicas sharing a PostgreSQL store need. The events a store numbers itself
// (a sequence, on PostgreSQL; SQLite numbers a row it is not given a number for), each with the
// lifetime it belongs to and its dedupe key, unique per instance and lifetime; and the leases.
absl::Status SchemaV2(db::Database& db) {
  for (const auto& [column, type] :
       {std::pair{"lifetime_ms", "INTEGER"}, std::pair{"dedupe", "TEXT"}}) {
    if (absl::Status s = db.AddColumnIfMissing("events", column, type); !s.ok()) return s;
  }
  if (absl::Status s = db.ExecDdl(
          "CREATE UNIQUE INDEX IF NOT EXISTS events_once ON events (instance_id, lifetime_ms, "
          "dedupe) WHERE dedupe IS NOT NULL;"
          "CREATE TABLE IF NOT EXISTS replicas (replica_id TEXT PRIMARY KEY, epoch INTEGER, "
          "expires_ms INTEGER);");
      !s.ok()) {
    return s;
  }
  if (db.backend() != db::Backend::kPostgres) return absl::OkStatus();
  if (absl::Status s = db.ExecDdl(
          "CREATE SEQUENCE IF NOT EXISTS events_sequence OWNED BY events.sequence;"
          "ALTER TABLE events ALTER COLUMN sequence SET DEFAULT nextval('events_sequence');");
      !s.ok()) {
    return s;
  }
  return db
      .QueryAll(
          "SELECT setval('events_sequence', COALESCE(MAX(sequence), 0) + 1, false) FROM events")
      .status();
}

const db::Migration kMigrations[] = {{1, SchemaV1}, {2, SchemaV2}};

constexpr char kInstanceColumns[] =
    "SELECT instance_id, job_id, cloud, endpoint, state, reason, last_heartbeat_ms, "
    "notice_effective_ms, instance_type, registered_ms FROM instances";

StoredInstance InstanceOf(const Row& r) {
  StoredInstance i;
  i.instance.instance_id = r.Text(0);
  i.instance.job_id = r.Text(1);
  i.instance.cloud = static_cast<Cloud>(r.Int(2));
  i.instance.metadata_endpoint = r.Text(3);
  i.instance.state = static_cast<InstanceState>(r.Int(4));
  i.instance.reason = r.Text(5);
  i.instance.last_heartbeat_unix_ms = r.Int(6);
  i.notice_effective_unix_ms = r.Int(7);
  i.instance.instance_type = r.Text(8);
  i.instance.registered_unix_ms = r.Int(9);
  return i;
}

constexpr char kEventColumns[] =
    "SELECT sequence, instance_id, job_id, cloud, kind, action, notice_ms, effective_ms, detail, "
    "lifetime_ms, dedupe ";

Event EventOf(const Row& r) {
  Event e;
  e.sequence = static_cast<uint64_t>(r.Int(0));
  e.instance_id = r.Text(1);
  e.job_id = r.Text(2);
  e.cloud = static_cast<Cloud>(r.Int(3));
  e.kind = static_cast<EventKind>(r.Int(4));
  e.action = r.Text(5);
  e.notice_unix_ms = r.Int(6);
  e.effective_unix_ms = r.Int(7);
  e.detail = r.Text(8);
  return e;
}

// The notice key an event row read with kEventColumns holds, if any, into `keys` (when given).
void KeepKey(const Row& r, const Event& e, std::vector<RecordedKey>* keys) {
  const bool notice = e.kind == EventKind::kNotice || e.kind == EventKind::kRebalance ||
                      e.kind == EventKind::kMaintenance;
  if (keys == nullptr || !notice || r.IsNull(10)) return;
  keys->push_back({e.instance_id, r.Int(9), r.Text(10)});
}

// `status` with what the store was doing.
absl::Status Doing(const absl::Status& status, const char* what) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("detector store: ", what, ": ", status.message()));
}

}  // namespace

DetectorStore::DetectorStore(std::unique_ptr<db::Database> db) : db_(std::move(db)) {}

absl::StatusOr<std::unique_ptr<DetectorStore>> DetectorStore::Open(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<db::Database>> db =
      db::OpenStore(spec, "store", "spotdnn_detector", kMigrations);
  if (!db.ok()) return db.status();
  return std::unique_ptr<DetectorStore>(new DetectorStore(*std::move(db)));
}

DetectorStore::~DetectorStore() = default;

void DetectorStore::RetryBriefly() {
  db_->set_retry_policy({.max_attempts = 2,
                         .initial_backoff = absl::Milliseconds(50),
                         .max_backoff = absl::Milliseconds(100)});
}

bool DetectorStore::shared() const { return db_->backend() == db::Backend::kPostgres; }

const char* DetectorStore::NowMs() const {
  return shared() ? "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
                  : "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";
}

absl::StatusOr<std::vector<StoredInstance>> DetectorStore::LoadInstances() {
  auto rows = db_->QueryAll(kInstanceColumns);
  if (!rows.ok()) return Doing(rows.status(), "load instances");
  std::vector<StoredInstance> out;
  out.reserve(rows->size());
  for (const Row& r : *rows) out.push_back(InstanceOf(r));
  return out;
}

absl::StatusOr<std::optional<StoredInstance>> DetectorStore::LoadInstance(
    const std::string& instance_id) {
  auto row =
      db_->QueryOne(absl::StrCat(kInstanceColumns, " WHERE instance_id = ?1"), {instance_id});
  if (!row.ok()) return Doing(row.status(), "load instance");
  if (!row->has_value()) return std::optional<StoredInstance>();
  return std::optional<StoredInstance>(InstanceOf(**row));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> DetectorStore::LoadSeen() {
  auto rows = db_->QueryAll("SELECT instance_id, key FROM seen");
  if (!rows.ok()) return Doing(rows.status(), "load seen");
  std::vector<std::pair<std::string, std::string>> out;
  for (const Row& r : *rows) out.emplace_back(r.Text(0), r.Text(1));
  return out;
}

absl::StatusOr<std::vector<Event>> DetectorStore::LoadEvents(size_t limit,
                                                             std::vector<RecordedKey>* keys) {
  auto rows = db_->QueryAll(
      absl::StrCat(kEventColumns,
                   "FROM (SELECT * FROM events ORDER BY sequence DESC LIMIT ?1) AS newest "
                   "ORDER BY sequence"),
      {static_cast<int64_t>(limit)});
  if (!rows.ok()) return Doing(rows.status(), "load events");
  std::vector<Event> out;
  for (const Row& r : *rows) {
    out.push_back(EventOf(r));
    KeepKey(r, out.back(), keys);
  }
  return out;
}

absl::StatusOr<std::vector<Event>> DetectorStore::EventsAfter(uint64_t after, size_t limit,
                                                              std::vector<RecordedKey>* keys) {
  auto rows = db_->QueryAll(
      absl::StrCat(kEventColumns, "FROM events WHERE sequence > ?1 ORDER BY sequence LIMIT ?2"),
      {static_cast<int64_t>(after), static_cast<int64_t>(limit)});
  if (!rows.ok()) return Doing(rows.status(), "read events");
  std::vector<Event> out;
  for (const Row& r : *rows) {
    out.push_back(EventOf(r));
    KeepKey(r, out.back(), keys);
  }
  return out;
}

absl::StatusOr<bool> DetectorStore::AppendSharedEvent(const Event& e, int64_t lifetime_ms,
                                                      const std::string& dedupe,
                                                      const StoredInstance& instance,
                                                      const std::string& replica_id,
                                                      int64_t epoch) {
  bool appended = false;
  absl::Status s = db_->Write([&]() -> absl::Status {
    appended = false;
    auto held = db_->QueryOne(
        absl::StrCat("SELECT epoch FROM replicas WHERE replica_id = ?1 AND epoch = ?2 AND "
                     "expires_ms > ",
                     NowMs()),
        {replica_id, epoch});
    if (!held.ok()) return Doing(held.status(), "check lease");
    if (!held->has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("detector store: replica \"", replica_id,
                       "\" no longer holds its lease of "
                       "epoch ",
                       epoch, "; it records nothing until it joins again"));
    }
    const db::Value key = dedupe.empty() ? db::Value(nullptr) : db::Value(dedupe);
    auto inserted = db_->Exec(
        "INSERT INTO events (instance_id, job_id, cloud, kind, action, notice_ms, effective_ms, "
        "detail, lifetime_ms, dedupe) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
        "ON CONFLICT DO NOTHING",
        {e.instance_id, e.job_id, static_cast<int64_t>(e.cloud), static_cast<int64_t>(e.kind),
         e.action, e.notice_unix_ms, e.effective_unix_ms, e.detail, lifetime_ms, key});
    if (!inserted.ok()) return Doing(inserted.status(), "append event");
    appended = *inserted > 0;
    if (!appended) return absl::OkStatus();
    return UpdateInstanceState(instance);
  });
  if (!s.ok()) return s;
  return appended;
}

absl::Status DetectorStore::UpdateInstanceState(const StoredInstance& i) {
  return Doing(
      db_->Exec("UPDATE instances SET state = ?2, reason = ?3, last_heartbeat_ms = CASE WHEN "
                "last_heartbeat_ms > ?4 THEN last_heartbeat_ms ELSE ?4 END, "
                "notice_effective_ms = ?5 WHERE instance_id = ?1 AND registered_ms = ?6",
                {i.instance.instance_id, static_cast<int64_t>(i.instance.state), i.instance.reason,
                 i.instance.last_heartbeat_unix_ms, i.notice_effective_unix_ms,
                 i.instance.registered_unix_ms})
          .status(),
      "store instance state");
}

absl::Status DetectorStore::FlushHeartbeats(
    const std::vector<std::pair<std::string, int64_t>>& heartbeats) {
  if (heartbeats.empty()) return absl::OkStatus();
  return db_->Write([&]() -> absl::Status {
    for (const auto& [id, ms] : heartbeats) {
      auto updated = db_->Exec(
          "UPDATE instances SET last_heartbeat_ms = ?2 WHERE instance_id = ?1 AND "
          "(last_heartbeat_ms IS NULL OR last_heartbeat_ms < ?2)",
          {id, ms});
      if (!updated.ok()) return Doing(updated.status(), "store heartbeats");
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> DetectorStore::JoinLease(const std::string& replica_id, int64_t lease_ms) {
  // Two statements, each atomic on its own, outside a write transaction: a write transaction
  // queues for the store's one writer lock behind every replica's event appends, and on a starved
  // host a replica that lost its lease then waited seconds to join again, its instances polled by
  // nobody meanwhile. Nothing here needs that lock: forgetting long-expired rows can happen any
  // time, and the upsert takes the row's own lock.
  auto forgot = db_->Exec(
      absl::StrCat("DELETE FROM replicas WHERE expires_ms < ", NowMs(), " - 20 * ?1"), {lease_ms});
  if (!forgot.ok()) return Doing(forgot.status(), "forget expired leases");
  // Epochs never repeat for an id, even once its row was forgotten: the database's clock in ms,
  // or one more than the row's, whichever is larger (an old holder's epoch stays fenced off).
  auto row = db_->QueryOne(
      absl::StrCat("INSERT INTO replicas (replica_id, epoch, expires_ms) VALUES (?1, ", NowMs(),
                   ", ", NowMs(),
                   " + ?2) ON CONFLICT (replica_id) DO UPDATE SET epoch = CASE WHEN "
                   "replicas.epoch >= excluded.epoch THEN replicas.epoch + 1 ELSE "
                   "excluded.epoch END, expires_ms = excluded.expires_ms RETURNING epoch"),
      {replica_id, lease_ms});
  if (!row.ok()) return Doing(row.status(), "join");
  if (!row->has_value()) return absl::InternalError("detector store: join returned no epoch");
  return (*row)->Int(0);
}

absl::StatusOr<bool> DetectorStore::RenewLease(const std::string& replica_id, int64_t epoch,
                                               int64_t lease_ms) {
  auto renewed = db_->Exec(
      absl::StrCat("UPDATE replicas SET expires_ms = ", NowMs(),
                   " + ?3 WHERE replica_id = ?1 AND epoch = ?2 AND expires_ms > ", NowMs()),
      {replica_id, epoch, lease_ms});
  if (!renewed.ok()) return Doing(renewed.status(), "renew lease");
  return *renewed > 0;
}

absl::Status DetectorStore::LeaveLease(const std::string& replica_id, int64_t epoch) {
  return Doing(
      db_->Exec("DELETE FROM replicas WHERE replica_id = ?1 AND epoch = ?2", {replica_id, epoch})
          .status(),
      "leave");
}

absl::StatusOr<std::vector<Lease>> DetectorStore::LiveLeases() {
  auto rows = db_->QueryAll(
      absl::StrCat("SELECT replica_id, epoch, expires_ms FROM replicas WHERE expires_ms > ",
                   NowMs(), " ORDER BY replica_id"));
  if (!rows.ok()) return Doing(rows.status(), "read leases");
  std::vector<Lease> out;
  for (const Row& r : *rows) out.push_back({r.Text(0), r.Int(1), r.Int(2)});
  return out;
}

absl::Status DetectorStore::PutInstance(const StoredInstance& i) {
  return Doing(
      db_->Exec("INSERT INTO instances (instance_id, job_id, cloud, endpoint, state, reason, "
                "last_heartbeat_ms, notice_effective_ms, instance_type, registered_ms) VALUES "
                "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (instance_id) DO UPDATE "
                "SET job_id = excluded.job_id, cloud = excluded.cloud, endpoint = "
                "excluded.endpoint, state = excluded.state, reason = excluded.reason, "
                "last_heartbeat_ms = excluded.last_heartbeat_ms, notice_effective_ms = "
                "excluded.notice_effective_ms, instance_type = excluded.instance_type, "
                "registered_ms = excluded.registered_ms",
                {i.instance.instance_id, i.instance.job_id, static_cast<int64_t>(i.instance.cloud),
                 i.instance.metadata_endpoint, static_cast<int64_t>(i.instance.state),
                 i.instance.reason, i.instance.last_heartbeat_unix_ms, i.notice_effective_unix_ms,
                 i.instance.instance_type, i.instance.registered_unix_ms})
          .status(),
      "store instance");
}

absl::Status DetectorStore::ResetInstance(const StoredInstance& instance) {
  return db_->Write([&]() -> absl::Status {
    auto seen =
        db_->Exec("DELETE FROM seen WHERE instance_id = ?1", {instance.instance.instance_id});
    if (!seen.ok()) return Doing(seen.status(), "delete seen keys");
    return PutInstance(instance);
  });
}

absl::Status DetectorStore::DeleteInstance(const std::string& instance_id) {
  auto a = db_->Exec("DELETE FROM instances WHERE instance_id = ?1", {instance_id});
  if (!a.ok()) return Doing(a.status(), "delete instance");
  return Doing(db_->Exec("DELETE FROM seen WHERE instance_id = ?1", {instance_id}).status(),
               "delete seen keys");
}

absl::Status DetectorStore::AppendEvent(const Event& e, const StoredInstance& instance,
                                        const std::string& seen_key) {
  return db_->Write([&]() -> absl::Status {
    auto appended = db_->Exec(
        "INSERT INTO events (sequence, instance_id, job_id, cloud, kind, action, notice_ms, "
        "effective_ms, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        {static_cast<int64_t>(e.sequence), e.instance_id, e.job_id, static_cast<int64_t>(e.cloud),
         static_cast<int64_t>(e.kind), e.action, e.notice_unix_ms, e.effective_unix_ms, e.detail});
    if (!appended.ok()) return Doing(appended.status(), "append event");
    if (!seen_key.empty()) {
      auto seen =
          db_->Exec("INSERT INTO seen (instance_id, key) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                    {e.instance_id, seen_key});
      if (!seen.ok()) return Doing(seen.status(), "store seen key");
    }
    return PutInstance(instance);
  });
}

absl::Status DetectorStore::TrimEvents(uint64_t first_kept) {
  return Doing(
      db_->Exec("DELETE FROM events WHERE sequence < ?1", {static_cast<int64_t>(first_kept)})
          .status(),
      "trim events");
}

absl::Status DetectorStore::AddLifetime(const Lifetime& l) {
  return Doing(
      db_->Exec("INSERT INTO lifetimes (instance_id, job_id, instance_type, started_ms, ended_ms, "
                "revoked, how) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                {l.instance_id, l.job_id, l.instance_type, l.started_unix_ms, l.ended_unix_ms,
                 int64_t{l.revoked ? 1 : 0}, l.how})
          .status(),
      "store lifetime");
}

absl::StatusOr<std::vector<Lifetime>> DetectorStore::LoadLifetimes(const std::string& type,
                                                                   size_t limit) {
  auto rows = db_->QueryAll(
      "SELECT instance_id, job_id, instance_type, started_ms, ended_ms, revoked, how FROM "
      "(SELECT * FROM lifetimes WHERE ?1 = '' OR instance_type = ?1 ORDER BY id DESC LIMIT ?2) "
      "AS newest ORDER BY id",
      {type, static_cast<int64_t>(limit)});
  if (!rows.ok()) return Doing(rows.status(), "load lifetimes");
  std::vector<Lifetime> out;
  for (const Row& r : *rows) {
    Lifetime l;
    l.instance_id = r.Text(0);
    l.job_id = r.Text(1);
    l.instance_type = r.Text(2);
    l.started_unix_ms = r.Int(3);
    l.ended_unix_ms = r.Int(4);
    l.revoked = r.Int(5) != 0;
    l.how = r.Text(6);
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace spotdnn::detector
