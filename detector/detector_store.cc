#include "detector/detector_store.h"

#include "absl/strings/str_cat.h"
#include "services/common/db/database.h"

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

const db::Migration kMigrations[] = {{1, SchemaV1}};

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

absl::StatusOr<std::vector<StoredInstance>> DetectorStore::LoadInstances() {
  auto rows = db_->QueryAll(
      "SELECT instance_id, job_id, cloud, endpoint, state, reason, last_heartbeat_ms, "
      "notice_effective_ms, instance_type, registered_ms FROM instances");
  if (!rows.ok()) return Doing(rows.status(), "load instances");
  std::vector<StoredInstance> out;
  for (const Row& r : *rows) {
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
    out.push_back(std::move(i));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> DetectorStore::LoadSeen() {
  auto rows = db_->QueryAll("SELECT instance_id, key FROM seen");
  if (!rows.ok()) return Doing(rows.status(), "load seen");
  std::vector<std::pair<std::string, std::string>> out;
  for (const Row& r : *rows) out.emplace_back(r.Text(0), r.Text(1));
  return out;
}

absl::StatusOr<std::vector<Event>> DetectorStore::LoadEvents(size_t limit) {
  auto rows = db_->QueryAll(
      "SELECT sequence, instance_id, job_id, cloud, kind, action, notice_ms, effective_ms, detail "
      "FROM (SELECT * FROM events ORDER BY sequence DESC LIMIT ?1) AS newest ORDER BY sequence",
      {static_cast<int64_t>(limit)});
  if (!rows.ok()) return Doing(rows.status(), "load events");
  std::vector<Event> out;
  for (const Row& r : *rows) {
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
    out.push_back(std::move(e));
  }
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
