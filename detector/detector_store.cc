#include "detector/detector_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace spotdnn::detector {
namespace {

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  Statement& Bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int i, int64_t value) {
    sqlite3_bind_int64(stmt_, i, value);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, i))
             : std::string();
  }
  int64_t Int(int i) const { return sqlite3_column_int64(stmt_, i); }
  absl::Status Error(const char* what) const {
    return absl::InternalError(absl::StrCat("detector store: ", what, ": ", sqlite3_errmsg(db_)));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

absl::Status RunDone(Statement& s, const char* what) {
  if (!s.ok()) return s.Error(what);
  if (s.Step() != SQLITE_DONE) return s.Error(what);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DetectorStore>> DetectorStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InvalidArgumentError(
        absl::StrCat("db = \"", path, "\": cannot open SQLite database: ", message));
  }
  std::unique_ptr<DetectorStore> store(new DetectorStore(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* sql : {
           "PRAGMA journal_mode=WAL",
           "PRAGMA synchronous=NORMAL",
           "CREATE TABLE IF NOT EXISTS instances (instance_id TEXT PRIMARY KEY, job_id TEXT, "
           "cloud INTEGER, endpoint TEXT, state INTEGER, reason TEXT, last_heartbeat_ms INTEGER, "
           "notice_effective_ms INTEGER)",
           "CREATE TABLE IF NOT EXISTS seen (instance_id TEXT, key TEXT, "
           "PRIMARY KEY (instance_id, key))",
           "CREATE TABLE IF NOT EXISTS events (sequence INTEGER PRIMARY KEY, instance_id TEXT, "
           "job_id TEXT, cloud INTEGER, kind INTEGER, action TEXT, notice_ms INTEGER, "
           "effective_ms INTEGER, detail TEXT)",
           "CREATE TABLE IF NOT EXISTS lifetimes (id INTEGER PRIMARY KEY AUTOINCREMENT, "
           "instance_id TEXT, job_id TEXT, instance_type TEXT, started_ms INTEGER, "
           "ended_ms INTEGER, revoked INTEGER, how TEXT)",
       }) {
    if (auto s = store->Exec(sql); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("db = \"", path, "\": ", s.message()));
    }
  }
  // Databases from before instance types and lifetimes were kept get the new columns.
  for (const char* column : {"instance_type TEXT", "registered_ms INTEGER"}) {
    const std::string name = std::string(column).substr(0, std::string(column).find(' '));
    Statement probe(db, ("SELECT " + name + " FROM instances LIMIT 0").c_str());
    if (probe.ok()) continue;
    if (auto s = store->Exec(("ALTER TABLE instances ADD COLUMN " + std::string(column)).c_str());
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("db = \"", path, "\": ", s.message()));
    }
  }
  return store;
}

DetectorStore::~DetectorStore() { sqlite3_close(db_); }

absl::Status DetectorStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("detector store: ", message));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredInstance>> DetectorStore::LoadInstances() {
  Statement s(db_,
              "SELECT instance_id, job_id, cloud, endpoint, state, reason, last_heartbeat_ms, "
              "notice_effective_ms, instance_type, registered_ms FROM instances");
  if (!s.ok()) return s.Error("load instances");
  std::vector<StoredInstance> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    StoredInstance i;
    i.instance.instance_id = s.Text(0);
    i.instance.job_id = s.Text(1);
    i.instance.cloud = static_cast<Cloud>(s.Int(2));
    i.instance.metadata_endpoint = s.Text(3);
    i.instance.state = static_cast<InstanceState>(s.Int(4));
    i.instance.reason = s.Text(5);
    i.instance.last_heartbeat_unix_ms = s.Int(6);
    i.notice_effective_unix_ms = s.Int(7);
    i.instance.instance_type = s.Text(8);
    i.instance.registered_unix_ms = s.Int(9);
    out.push_back(std::move(i));
  }
  if (rc != SQLITE_DONE) return s.Error("load instances");
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> DetectorStore::LoadSeen() {
  Statement s(db_, "SELECT instance_id, key FROM seen");
  if (!s.ok()) return s.Error("load seen");
  std::vector<std::pair<std::string, std::string>> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.emplace_back(s.Text(0), s.Text(1));
  if (rc != SQLITE_DONE) return s.Error("load seen");
  return out;
}

absl::StatusOr<std::vector<Event>> DetectorStore::LoadEvents(size_t limit) {
  Statement s(db_,
              "SELECT sequence, instance_id, job_id, cloud, kind, action, notice_ms, "
              "effective_ms, detail FROM (SELECT * FROM events ORDER BY sequence DESC LIMIT ?) "
              "ORDER BY sequence");
  if (!s.ok()) return s.Error("load events");
  s.Bind(1, static_cast<int64_t>(limit));
  std::vector<Event> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    Event e;
    e.sequence = static_cast<uint64_t>(s.Int(0));
    e.instance_id = s.Text(1);
    e.job_id = s.Text(2);
    e.cloud = static_cast<Cloud>(s.Int(3));
    e.kind = static_cast<EventKind>(s.Int(4));
    e.action = s.Text(5);
    e.notice_unix_ms = s.Int(6);
    e.effective_unix_ms = s.Int(7);
    e.detail = s.Text(8);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return s.Error("load events");
  return out;
}

absl::Status DetectorStore::PutInstance(const StoredInstance& i) {
  Statement s(db_,
              "INSERT OR REPLACE INTO instances (instance_id, job_id, cloud, endpoint, state, "
              "reason, last_heartbeat_ms, notice_effective_ms, instance_type, registered_ms) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.Bind(1, i.instance.instance_id)
      .Bind(2, i.instance.job_id)
      .Bind(3, static_cast<int64_t>(i.instance.cloud))
      .Bind(4, i.instance.metadata_endpoint)
      .Bind(5, static_cast<int64_t>(i.instance.state))
      .Bind(6, i.instance.reason)
      .Bind(7, i.instance.last_heartbeat_unix_ms)
      .Bind(8, i.notice_effective_unix_ms)
      .Bind(9, i.instance.instance_type)
      .Bind(10, i.instance.registered_unix_ms);
  return RunDone(s, "store instance");
}

absl::Status DetectorStore::ResetInstance(const StoredInstance& instance) {
  if (auto s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  auto body = [&]() -> absl::Status {
    Statement seen(db_, "DELETE FROM seen WHERE instance_id = ?");
    seen.Bind(1, instance.instance.instance_id);
    if (auto st = RunDone(seen, "delete seen keys"); !st.ok()) return st;
    return PutInstance(instance);
  };
  if (auto s = body(); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

absl::Status DetectorStore::DeleteInstance(const std::string& instance_id) {
  Statement a(db_, "DELETE FROM instances WHERE instance_id = ?");
  a.Bind(1, instance_id);
  if (auto s = RunDone(a, "delete instance"); !s.ok()) return s;
  Statement b(db_, "DELETE FROM seen WHERE instance_id = ?");
  b.Bind(1, instance_id);
  return RunDone(b, "delete seen keys");
}

absl::Status DetectorStore::AppendEvent(const Event& e, const StoredInstance& instance,
                                        const std::string& seen_key) {
  if (auto s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  auto body = [&]() -> absl::Status {
    Statement s(db_,
                "INSERT INTO events (sequence, instance_id, job_id, cloud, kind, action, "
                "notice_ms, effective_ms, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, static_cast<int64_t>(e.sequence))
        .Bind(2, e.instance_id)
        .Bind(3, e.job_id)
        .Bind(4, static_cast<int64_t>(e.cloud))
        .Bind(5, static_cast<int64_t>(e.kind))
        .Bind(6, e.action)
        .Bind(7, e.notice_unix_ms)
        .Bind(8, e.effective_unix_ms)
        .Bind(9, e.detail);
    if (auto st = RunDone(s, "append event"); !st.ok()) return st;
    if (!seen_key.empty()) {
      Statement k(db_, "INSERT OR IGNORE INTO seen (instance_id, key) VALUES (?, ?)");
      k.Bind(1, e.instance_id).Bind(2, seen_key);
      if (auto st = RunDone(k, "store seen key"); !st.ok()) return st;
    }
    return PutInstance(instance);
  };
  if (auto s = body(); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

absl::Status DetectorStore::TrimEvents(uint64_t first_kept) {
  Statement s(db_, "DELETE FROM events WHERE sequence < ?");
  s.Bind(1, static_cast<int64_t>(first_kept));
  return RunDone(s, "trim events");
}

absl::Status DetectorStore::AddLifetime(const Lifetime& l) {
  Statement s(db_,
              "INSERT INTO lifetimes (instance_id, job_id, instance_type, started_ms, ended_ms, "
              "revoked, how) VALUES (?, ?, ?, ?, ?, ?, ?)");
  s.Bind(1, l.instance_id)
      .Bind(2, l.job_id)
      .Bind(3, l.instance_type)
      .Bind(4, l.started_unix_ms)
      .Bind(5, l.ended_unix_ms)
      .Bind(6, static_cast<int64_t>(l.revoked))
      .Bind(7, l.how);
  return RunDone(s, "store lifetime");
}

absl::StatusOr<std::vector<Lifetime>> DetectorStore::LoadLifetimes(const std::string& type,
                                                                   size_t limit) {
  Statement s(db_,
              "SELECT instance_id, job_id, instance_type, started_ms, ended_ms, revoked, how FROM "
              "(SELECT * FROM lifetimes WHERE ? = '' OR instance_type = ? ORDER BY id DESC "
              "LIMIT ?) ORDER BY id");
  if (!s.ok()) return s.Error("load lifetimes");
  s.Bind(1, type).Bind(2, type).Bind(3, static_cast<int64_t>(limit));
  std::vector<Lifetime> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    Lifetime l;
    l.instance_id = s.Text(0);
    l.job_id = s.Text(1);
    l.instance_type = s.Text(2);
    l.started_unix_ms = s.Int(3);
    l.ended_unix_ms = s.Int(4);
    l.revoked = s.Int(5) != 0;
    l.how = s.Text(6);
    out.push_back(std::move(l));
  }
  if (rc != SQLITE_DONE) return s.Error("load lifetimes");
  return out;
}

}  // namespace spotdnn::detector
