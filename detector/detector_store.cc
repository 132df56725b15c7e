#include "detector/detector_store.h"

#include "absl/strings/str_cat.h"
#include "services/common/db/sqlite.h"

namespace spotdnn::detector {
namespace {

using sql::Statement;
using sql::Transaction;

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

// Runs a statement that returns no rows.
absl::Status RunDone(Statement& s, const char* what) {
  if (!s.status().ok()) return s.status();
  return s.Run(absl::StrCat("detector store: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DetectorStore>> DetectorStore::Open(const std::string& path) {
  absl::StatusOr<sqlite3*> db = sql::OpenDatabase(path, "db", kSchema);
  if (!db.ok()) return db.status();
  std::unique_ptr<DetectorStore> store(new DetectorStore(*db));
  // Databases from before instance types and lifetimes were kept get the new columns.
  for (const auto& [column, type] :
       {std::pair{"instance_type", "TEXT"}, std::pair{"registered_ms", "INTEGER"}}) {
    if (auto s = sql::AddColumnIfMissing(*db, "instances", column, type); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("db = \"", path, "\": ", s.message()));
    }
  }
  return store;
}

DetectorStore::~DetectorStore() { sqlite3_close(db_); }

absl::StatusOr<std::vector<StoredInstance>> DetectorStore::LoadInstances() {
  Statement s(db_,
              "SELECT instance_id, job_id, cloud, endpoint, state, reason, last_heartbeat_ms, "
              "notice_effective_ms, instance_type, registered_ms FROM instances");
  if (!s.status().ok()) return s.status();
  std::vector<StoredInstance> out;
  while (true) {
    absl::StatusOr<bool> row = s.Step("detector store: load instances");
    if (!row.ok()) return row.status();
    if (!*row) break;
    StoredInstance i;
    i.instance.instance_id = s.ColumnText(0);
    i.instance.job_id = s.ColumnText(1);
    i.instance.cloud = static_cast<Cloud>(s.ColumnInt(2));
    i.instance.metadata_endpoint = s.ColumnText(3);
    i.instance.state = static_cast<InstanceState>(s.ColumnInt(4));
    i.instance.reason = s.ColumnText(5);
    i.instance.last_heartbeat_unix_ms = s.ColumnInt(6);
    i.notice_effective_unix_ms = s.ColumnInt(7);
    i.instance.instance_type = s.ColumnText(8);
    i.instance.registered_unix_ms = s.ColumnInt(9);
    out.push_back(std::move(i));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> DetectorStore::LoadSeen() {
  Statement s(db_, "SELECT instance_id, key FROM seen");
  if (!s.status().ok()) return s.status();
  std::vector<std::pair<std::string, std::string>> out;
  while (true) {
    absl::StatusOr<bool> row = s.Step("detector store: load seen");
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.emplace_back(s.ColumnText(0), s.ColumnText(1));
  }
  return out;
}

absl::StatusOr<std::vector<Event>> DetectorStore::LoadEvents(size_t limit) {
  Statement s(db_,
              "SELECT sequence, instance_id, job_id, cloud, kind, action, notice_ms, "
              "effective_ms, detail FROM (SELECT * FROM events ORDER BY sequence DESC LIMIT ?) "
              "ORDER BY sequence");
  if (!s.status().ok()) return s.status();
  s.Int(1, static_cast<int64_t>(limit));
  std::vector<Event> out;
  while (true) {
    absl::StatusOr<bool> row = s.Step("detector store: load events");
    if (!row.ok()) return row.status();
    if (!*row) break;
    Event e;
    e.sequence = static_cast<uint64_t>(s.ColumnInt(0));
    e.instance_id = s.ColumnText(1);
    e.job_id = s.ColumnText(2);
    e.cloud = static_cast<Cloud>(s.ColumnInt(3));
    e.kind = static_cast<EventKind>(s.ColumnInt(4));
    e.action = s.ColumnText(5);
    e.notice_unix_ms = s.ColumnInt(6);
    e.effective_unix_ms = s.ColumnInt(7);
    e.detail = s.ColumnText(8);
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status DetectorStore::PutInstance(const StoredInstance& i) {
  Statement s(db_,
              "INSERT OR REPLACE INTO instances (instance_id, job_id, cloud, endpoint, state, "
              "reason, last_heartbeat_ms, notice_effective_ms, instance_type, registered_ms) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.Text(1, i.instance.instance_id);
  s.Text(2, i.instance.job_id);
  s.Int(3, static_cast<int64_t>(i.instance.cloud));
  s.Text(4, i.instance.metadata_endpoint);
  s.Int(5, static_cast<int64_t>(i.instance.state));
  s.Text(6, i.instance.reason);
  s.Int(7, i.instance.last_heartbeat_unix_ms);
  s.Int(8, i.notice_effective_unix_ms);
  s.Text(9, i.instance.instance_type);
  s.Int(10, i.instance.registered_unix_ms);
  return RunDone(s, "store instance");
}

absl::Status DetectorStore::ResetInstance(const StoredInstance& instance) {
  Transaction transaction(db_);
  if (!transaction.status().ok()) return transaction.status();
  Statement seen(db_, "DELETE FROM seen WHERE instance_id = ?");
  seen.Text(1, instance.instance.instance_id);
  if (auto st = RunDone(seen, "delete seen keys"); !st.ok()) return st;
  if (auto st = PutInstance(instance); !st.ok()) return st;
  return transaction.Commit();
}

absl::Status DetectorStore::DeleteInstance(const std::string& instance_id) {
  Statement a(db_, "DELETE FROM instances WHERE instance_id = ?");
  a.Text(1, instance_id);
  if (auto s = RunDone(a, "delete instance"); !s.ok()) return s;
  Statement b(db_, "DELETE FROM seen WHERE instance_id = ?");
  b.Text(1, instance_id);
  return RunDone(b, "delete seen keys");
}

absl::Status DetectorStore::AppendEvent(const Event& e, const StoredInstance& instance,
                                        const std::string& seen_key) {
  Transaction transaction(db_);
  if (!transaction.status().ok()) return transaction.status();
  Statement s(db_,
              "INSERT INTO events (sequence, instance_id, job_id, cloud, kind, action, "
              "notice_ms, effective_ms, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.Int(1, static_cast<int64_t>(e.sequence));
  s.Text(2, e.instance_id);
  s.Text(3, e.job_id);
  s.Int(4, static_cast<int64_t>(e.cloud));
  s.Int(5, static_cast<int64_t>(e.kind));
  s.Text(6, e.action);
  s.Int(7, e.notice_unix_ms);
  s.Int(8, e.effective_unix_ms);
  s.Text(9, e.detail);
  if (auto st = RunDone(s, "append event"); !st.ok()) return st;
  if (!seen_key.empty()) {
    Statement k(db_, "INSERT OR IGNORE INTO seen (instance_id, key) VALUES (?, ?)");
    k.Text(1, e.instance_id);
    k.Text(2, seen_key);
    if (auto st = RunDone(k, "store seen key"); !st.ok()) return st;
  }
  if (auto st = PutInstance(instance); !st.ok()) return st;
  return transaction.Commit();
}

absl::Status DetectorStore::TrimEvents(uint64_t first_kept) {
  Statement s(db_, "DELETE FROM events WHERE sequence < ?");
  s.Int(1, static_cast<int64_t>(first_kept));
  return RunDone(s, "trim events");
}

absl::Status DetectorStore::AddLifetime(const Lifetime& l) {
  Statement s(db_,
              "INSERT INTO lifetimes (instance_id, job_id, instance_type, started_ms, ended_ms, "
              "revoked, how) VALUES (?, ?, ?, ?, ?, ?, ?)");
  s.Text(1, l.instance_id);
  s.Text(2, l.job_id);
  s.Text(3, l.instance_type);
  s.Int(4, l.started_unix_ms);
  s.Int(5, l.ended_unix_ms);
  s.Int(6, l.revoked ? 1 : 0);
  s.Text(7, l.how);
  return RunDone(s, "store lifetime");
}

absl::StatusOr<std::vector<Lifetime>> DetectorStore::LoadLifetimes(const std::string& type,
                                                                   size_t limit) {
  Statement s(db_,
              "SELECT instance_id, job_id, instance_type, started_ms, ended_ms, revoked, how FROM "
              "(SELECT * FROM lifetimes WHERE ?1 = '' OR instance_type = ?1 ORDER BY id DESC "
              "LIMIT ?2) ORDER BY id");
  if (!s.status().ok()) return s.status();
  s.Text(1, type);
  s.Int(2, static_cast<int64_t>(limit));
  std::vector<Lifetime> out;
  while (true) {
    absl::StatusOr<bool> row = s.Step("detector store: load lifetimes");
    if (!row.ok()) return row.status();
    if (!*row) break;
    Lifetime l;
    l.instance_id = s.ColumnText(0);
    l.job_id = s.ColumnText(1);
    l.instance_type = s.ColumnText(2);
    l.started_unix_ms = s.ColumnInt(3);
    l.ended_unix_ms = s.ColumnInt(4);
    l.revoked = s.ColumnInt(5) != 0;
    l.how = s.ColumnText(6);
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace spotdnn::detector
