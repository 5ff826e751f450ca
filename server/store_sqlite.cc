// The SQLite engine of the store: see store_sqlite.h.
#include "server/store_sqlite.h"

#include <sqlite3.h>

#include <array>
#include <chrono>
#include <mutex>
#include <random>

#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::server {
namespace {

[[noreturn]] void fail(sqlite3* db, const std::string& path, std::string_view what) {
  const int code = db ? (sqlite3_extended_errcode(db) & 0xff) : SQLITE_NOMEM;
  const StoreError::Kind kind = code == SQLITE_FULL                               ? StoreError::Kind::kFull
                                : code == SQLITE_IOERR || code == SQLITE_CANTOPEN ? StoreError::Kind::kIo
                                                                                  : StoreError::Kind::kOther;
  throw StoreError(detail::StrCat("job store: ", what, " failed: ", db ? sqlite3_errmsg(db) : "out of memory",
                                  kind == StoreError::Kind::kFull ? " (free space on the data dir's volume)" : "",
                                  " (database ", path, ")"),
                   kind);
}

// Version 1. `jobs.metric_seq` is the last seq handed out for the job's metric stream; it
// lives apart from the metrics so that deleting events never lets a seq be handed out twice.
// AUTOINCREMENT keeps `seq` increasing even if jobs are ever deleted.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  client_job_id TEXT UNIQUE,
  spec_json TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  priority INTEGER NOT NULL,
  device TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  checkpoint TEXT NOT NULL,
  model_name TEXT NOT NULL,
  model_version INTEGER NOT NULL,
  metric_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE TABLE metrics (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  step INTEGER NOT NULL,
  kind TEXT NOT NULL,
  payload_json TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE INDEX metrics_by_step ON metrics (job_id, step);
CREATE TABLE models (
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  job_id TEXT NOT NULL,
  path TEXT NOT NULL,
  signature_json TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (name, version)
);
)sql";

// Version 2: how often the server died while a job ran (the crash-loop guard).
constexpr const char* kSchemaV2 = "ALTER TABLE jobs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;";
// Version 3: the checkpoint step the last counted crash resumed from, so that only stops
// without progress count.
constexpr const char* kSchemaV3 = "ALTER TABLE jobs ADD COLUMN crash_step INTEGER NOT NULL DEFAULT -1;";

// Version 4: leases, so that replicas can share the jobs (store.h), and the claims history.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN lease_expires_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE TABLE claims (
  n INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  epoch INTEGER NOT NULL,
  owner TEXT NOT NULL,
  claimed_ms INTEGER NOT NULL,
  UNIQUE (job_id, epoch)
);
)sql";

// Version 5: the rendezvous of data-parallel ranks across replicas (used on PostgreSQL only:
// workers/pg_rendezvous.h); the same tables on both engines.
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE rendezvous (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL,
  created_ms INTEGER NOT NULL
);
)sql";

// Version 6: nodes of data-parallel jobs across replicas (PostgreSQL only, like version 5).
constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE job_parts (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  epoch INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  node INTEGER NOT NULL,
  nnodes INTEGER NOT NULL,
  nproc INTEGER NOT NULL,
  checkpoint TEXT NOT NULL,
  state TEXT NOT NULL,
  owner TEXT NOT NULL DEFAULT '',
  lease_expires_ms INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, node)
);
)sql";

// The migration to version i + 1 is kMigrations[i]; each runs in the transaction that checks
// the version, so a failed one leaves the store at the version it had.
constexpr std::array<const char*, 6> kMigrations = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5, kSchemaV6};
static_assert(kMigrations.size() == Store::kSchemaVersion);

#define ANVIL_JOB_COLUMNS                                                                                      \
  "id, name, client_job_id, spec_json, state, reason, priority, device, created_ms, started_ms, finished_ms, " \
  "step, epoch, checkpoint, model_name, model_version, seq, crashes, crash_step, owner, lease_epoch, "         \
  "lease_expires_ms, cancel_requested"
#define ANVIL_METRIC_COLUMNS "job_id, seq, step, kind, payload_json, time_ms"
#define ANVIL_MODEL_COLUMNS "name, version, job_id, path, signature_json, created_ms"

// A statement compiled once and reused for the life of the connection; used through Query.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, std::string what, const char* sql)
      : db_(db), path_(path), what_(std::move(what)) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK) {
      fail(db, path, "preparing the statement to " + what_);
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

 private:
  friend class Query;
  sqlite3* db_;
  const std::string& path_;
  std::string what_;
  sqlite3_stmt* stmt_ = nullptr;
};

// One execution of a Statement: binds parameters (1-based), steps, reads columns (0-based),
// and resets the statement when it goes out of scope, also when an error unwinds it.
class Query {
 public:
  explicit Query(Statement& s) : s_(s) {}
  ~Query() {
    sqlite3_reset(s_.stmt_);
    sqlite3_clear_bindings(s_.stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(int i, int64_t v) { return check_bind(sqlite3_bind_int64(s_.stmt_, i, v)); }
  Query& bind(int i, std::string_view v) {
    return check_bind(sqlite3_bind_text(s_.stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Query& bind_null(int i) { return check_bind(sqlite3_bind_null(s_.stmt_, i)); }

  // Steps once: true when a row is ready to read, false when the statement has finished.
  bool next() {
    const int rc = sqlite3_step(s_.stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(s_.db_, s_.path_, s_.what_);
  }
  void run() { next(); }

  int64_t integer(int col) const { return sqlite3_column_int64(s_.stmt_, col); }
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_.stmt_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_.stmt_, col))) : std::string();
  }

 private:
  Query& check_bind(int rc) {
    if (rc != SQLITE_OK) fail(s_.db_, s_.path_, s_.what_ + " (binding a parameter)");
    return *this;
  }
  Statement& s_;
};

// BEGIN IMMEDIATE takes the write lock up front, so a read-then-write operation cannot fail
// half way with SQLITE_BUSY when another connection writes in between. Rolls back unless
// committed, so an exception leaves the database as it was.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path, std::string_view what) : db_(db), path_(path), what_(what) {
    exec("BEGIN IMMEDIATE");
  }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    exec("COMMIT");
    done_ = true;
  }

 private:
  void exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      fail(db_, path_, detail::StrCat(what_, " (", sql, ")"));
    }
  }
  sqlite3* db_;
  const std::string& path_;
  std::string_view what_;
  bool done_ = false;
};

JobRow read_job(const Query& q) {
  JobRow r;
  r.id = q.text(0);
  r.name = q.text(1);
  r.client_job_id = q.text(2);
  r.spec_json = q.text(3);
  r.state = parse_job_state(q.text(4));
  r.reason = q.text(5);
  r.priority = q.integer(6);
  r.device = q.text(7);
  r.created_ms = q.integer(8);
  r.started_ms = q.integer(9);
  r.finished_ms = q.integer(10);
  r.step = q.integer(11);
  r.epoch = q.integer(12);
  r.checkpoint = q.text(13);
  r.model_name = q.text(14);
  r.model_version = q.integer(15);
  r.seq = q.integer(16);
  r.crashes = q.integer(17);
  r.crash_step = q.integer(18);
  r.owner = q.text(19);
  r.lease_epoch = q.integer(20);
  r.lease_expires_ms = q.integer(21);
  r.cancel_requested = q.integer(22) != 0;
  return r;
}

MetricRow read_metric(const Query& q) {
  return MetricRow{q.text(0), q.integer(1), q.integer(2), q.text(3), q.text(4), q.integer(5)};
}

ModelRow read_model(const Query& q) {
  return ModelRow{q.text(0), q.integer(1), q.text(2), q.text(3), q.text(4), q.integer(5)};
}

// Binds the job's id and the fields update_job writes to parameters 1-14 (the order of the
// update statements' SET lists).
void bind_mutable(Query& q, const JobRow& row) {
  q.bind(1, row.id).bind(2, job_state_name(row.state)).bind(3, row.reason).bind(4, row.priority);
  q.bind(5, row.device).bind(6, row.started_ms).bind(7, row.finished_ms).bind(8, row.step).bind(9, row.epoch);
  q.bind(10, row.checkpoint).bind(11, row.model_name).bind(12, row.model_version).bind(13, row.crashes);
  q.bind(14, row.crash_step);
}

// Binds the distinct states of `states` to the six parameters starting at `first`; unused
// parameters stay NULL, which matches no row. A fixed parameter count keeps one prepared
// statement for every filter.
void bind_states(Query& q, int first, const std::vector<JobState>& states) {
  constexpr size_t kStates = static_cast<size_t>(JobState::kInterrupted) + 1;
  std::array<bool, kStates> wanted{};
  for (JobState s : states) wanted[static_cast<size_t>(s)] = true;
  int param = first;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) q.bind(param++, job_state_name(static_cast<JobState>(i)));
  }
}

struct CloseDb {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};

}  // namespace

// Members are destroyed in reverse order: the statements are finalised before the
// connection closes.
struct SqliteStore::Impl {
  std::string path;
  std::unique_ptr<sqlite3, CloseDb> db;
  // Serialises every method: the prepared statements and the id generator are its. (The
  // connection is used under it too, and, unlocked, by the constructor's schema checks.)
  mutable Mutex mu;
  std::mt19937_64 rng ABSL_GUARDED_BY(mu){std::random_device{}()};

  struct Statements {
    Statements(sqlite3* db, const std::string& p)
        : job_by_id(db, p, "read a job", "SELECT " ANVIL_JOB_COLUMNS " FROM jobs WHERE id = ?1"),
          job_by_client_id(db, p, "look up a job by client_job_id",
                           "SELECT " ANVIL_JOB_COLUMNS " FROM jobs WHERE client_job_id = ?1"),
          job_id_taken(db, p, "check a job id", "SELECT 1 FROM jobs WHERE id = ?1"),
          count_jobs(db, p, "count jobs by state", "SELECT state, COUNT(*) FROM jobs GROUP BY state"),
          insert_job(db, p, "insert a job",
                     "INSERT INTO jobs (id, name, client_job_id, spec_json, state, reason, priority, device, "
                     "created_ms, started_ms, finished_ms, step, epoch, checkpoint, model_name, model_version) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"),
          list_jobs(db, p, "list jobs",
                    "SELECT " ANVIL_JOB_COLUMNS
                    " FROM jobs WHERE (?1 OR state IN (?2, ?3, ?4, ?5, ?6, ?7)) AND (?9 = 0 OR seq < ?9) "
                    "ORDER BY seq DESC LIMIT ?8"),
          jobs_in_states(db, p, "list jobs by state",
                         "SELECT " ANVIL_JOB_COLUMNS
                         " FROM jobs WHERE state IN (?1, ?2, ?3, ?4, ?5, ?6) "
                         "ORDER BY seq ASC"),
          update_job(
              db, p, "update a job",
              "UPDATE jobs SET state = ?2, reason = ?3, priority = ?4, device = ?5, started_ms = ?6, "
              "finished_ms = ?7, step = ?8, epoch = ?9, checkpoint = ?10, model_name = ?11, "
              "model_version = ?12, crashes = ?13, crash_step = ?14 WHERE id = ?1 AND (?15 = 0 OR lease_epoch = ?15)"),
          bump_metric_seq(db, p, "advance a job's metric seq",
                          "UPDATE jobs SET metric_seq = metric_seq + 1 WHERE id = ?1 AND (?2 = 0 OR lease_epoch = ?2)"),
          read_metric_seq(db, p, "read a job's metric seq", "SELECT metric_seq FROM jobs WHERE id = ?1"),
          insert_metric(db, p, "append a metric event",
                        "INSERT INTO metrics (" ANVIL_METRIC_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
          metrics(db, p, "read metric events",
                  "SELECT " ANVIL_METRIC_COLUMNS
                  " FROM metrics WHERE job_id = ?1 AND step >= ?2 AND seq > ?3 "
                  "ORDER BY seq LIMIT ?4"),
          metrics_of_kind(db, p, "read metric events of a kind",
                          "SELECT " ANVIL_METRIC_COLUMNS " FROM metrics WHERE job_id = ?1 AND kind = ?2 ORDER BY seq"),
          truncate_metrics(db, p, "truncate metric events",
                           "DELETE FROM metrics WHERE job_id = ?1 AND step > ?2 AND kind IN ('step', 'epoch')"),
          next_model_version(db, p, "find the next model version",
                             "SELECT COALESCE(MAX(version), 0) + 1 FROM models WHERE name = ?1"),
          insert_model(db, p, "register a model",
                       "INSERT INTO models (" ANVIL_MODEL_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
          model_version(db, p, "read a model",
                        "SELECT " ANVIL_MODEL_COLUMNS " FROM models WHERE name = ?1 AND version = ?2"),
          model_latest(db, p, "read a model's latest version",
                       "SELECT " ANVIL_MODEL_COLUMNS " FROM models WHERE name = ?1 ORDER BY version DESC LIMIT 1"),
          list_models(db, p, "list models",
                      "SELECT " ANVIL_MODEL_COLUMNS
                      " FROM models WHERE (?1 = '' OR name = ?1) AND (name > ?2 OR (name = ?2 AND version > ?3)) "
                      "ORDER BY name, version LIMIT ?4"),
          recent_models(db, p, "list recent models",
                        "SELECT " ANVIL_MODEL_COLUMNS
                        " FROM models ORDER BY created_ms DESC, name, version DESC LIMIT ?1"),
          expired_jobs(db, p, "find expired jobs",
                       "SELECT id FROM (SELECT id, seq, finished_ms, ROW_NUMBER() OVER (ORDER BY seq DESC) AS newest "
                       "FROM jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) "
                       "WHERE (?1 > 0 AND newest > ?1) OR finished_ms < ?2 ORDER BY seq"),
          delete_metrics(db, p, "delete a job's metric events", "DELETE FROM metrics WHERE job_id = ?1"),
          delete_job(db, p, "delete a job", "DELETE FROM jobs WHERE id = ?1"),
          claimable(db, p, "list claimable jobs",
                    "SELECT id, COALESCE(json_extract(spec_json, '$.device'), device), priority, seq FROM jobs "
                    "WHERE state IN ('QUEUED', 'INTERRUPTED') AND cancel_requested = 0 "
                    "ORDER BY priority DESC, seq ASC"),
          claim(db, p, "claim a job",
                "UPDATE jobs SET state = 'RUNNING', owner = ?2, lease_epoch = lease_epoch + 1, lease_expires_ms = ?3 "
                "WHERE id = ?1"),
          record_claim(db, p, "record a claim",
                       "INSERT INTO claims (job_id, epoch, owner, claimed_ms) "
                       "SELECT id, lease_epoch, owner, ?2 FROM jobs WHERE id = ?1"),
          renew(db, p, "renew a lease",
                "UPDATE jobs SET lease_expires_ms = ?4 WHERE id = ?1 AND owner = ?2 AND lease_epoch = ?3 AND "
                "state = 'RUNNING' RETURNING cancel_requested"),
          lapsed(db, p, "find lapsed leases",
                 "SELECT " ANVIL_JOB_COLUMNS
                 " FROM jobs WHERE state = 'RUNNING' AND owner != '' AND lease_expires_ms < ?1 ORDER BY seq"),
          update_fenced(db, p, "update a job under its lease",
                        "UPDATE jobs SET state = ?2, reason = ?3, priority = ?4, device = ?5, started_ms = ?6, "
                        "finished_ms = ?7, step = ?8, epoch = ?9, checkpoint = ?10, model_name = ?11, "
                        "model_version = ?12, crashes = ?13, crash_step = ?14, owner = ?15, lease_epoch = ?16, "
                        "lease_expires_ms = ?17, cancel_requested = ?18 WHERE id = ?1 AND lease_epoch = ?19"),
          request_cancel(db, p, "ask for a cancel",
                         "UPDATE jobs SET cancel_requested = 1 WHERE id = ?1 AND state NOT IN ('SUCCEEDED', "
                         "'FAILED', 'CANCELLED')"),
          claims(db, p, "read the claims",
                 "SELECT job_id, epoch, owner, claimed_ms FROM claims WHERE ?1 = '' OR job_id = ?1 ORDER BY n") {}
    Statement job_by_id, job_by_client_id, job_id_taken, count_jobs, insert_job, list_jobs, jobs_in_states, update_job;
    Statement bump_metric_seq, read_metric_seq, insert_metric, metrics, metrics_of_kind, truncate_metrics;
    Statement next_model_version, insert_model, model_version, model_latest, list_models, recent_models;
    Statement expired_jobs, delete_metrics, delete_job;
    Statement claimable, claim, record_claim, renew, lapsed, update_fenced, request_cancel, claims;
  };
  std::unique_ptr<Statements> st ABSL_GUARDED_BY(mu);

  explicit Impl(std::string db_path, int64_t max_pages) : path(std::move(db_path)) {
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    db.reset(raw);  // the handle must be closed even when opening failed
    if (rc != SQLITE_OK) fail(raw, path, "opening the database");
    // Waits out another process's short write instead of failing at once with SQLITE_BUSY.
    sqlite3_busy_timeout(raw, 5000);
    exec("enable foreign keys", "PRAGMA foreign_keys = ON");
    exec("set synchronous mode", "PRAGMA synchronous = NORMAL");
    set_wal();
    ensure_schema();
    if (max_pages > 0) {
      const std::string pragma = "PRAGMA max_page_count = " + std::to_string(max_pages);
      exec("cap the database size", pragma.c_str());
    }
    st = std::make_unique<Statements>(raw, path);
  }

  void exec(std::string_view what, const char* sql) {
    if (sqlite3_exec(db.get(), sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(db.get(), path, what);
  }

  // WAL lets readers run while a writer commits, and makes a commit one append, not a
  // rewrite of the journal. The pragma answers with the mode actually in force.
  void set_wal() {
    Statement pragma(db.get(), path, "switch to the WAL journal", "PRAGMA journal_mode = WAL");
    Query q(pragma);
    const std::string mode = q.next() ? q.text(0) : "";
    ANVIL_CHECK(mode == "wal" || path == ":memory:", "job store: expected the WAL journal mode, got '", mode,
                "' (database ", path, ")");
  }

  void ensure_schema() {
    Transaction tx(db.get(), path, "checking the schema");
    Statement has_version(db.get(), path, "check the schema",
                          "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
    bool versioned = false;
    {
      Query q(has_version);
      versioned = q.next() && q.integer(0) > 0;
    }
    int64_t version = 0;
    if (!versioned) {
      Statement tables(db.get(), path, "check the schema", "SELECT count(*) FROM sqlite_master WHERE type = 'table'");
      Query q(tables);
      ANVIL_CHECK(q.next() && q.integer(0) == 0, "job store: expected an Anvil store or an empty database, got a ",
                  "database with tables but no schema_version table (database ", path, ")");
    } else {
      Statement read(db.get(), path, "read the schema version", "SELECT MAX(version) FROM schema_version");
      Query q(read);
      version = q.next() ? q.integer(0) : 0;
      ANVIL_CHECK(version <= Store::kSchemaVersion, "job store: the database has schema version ", version,
                  ", newer than version ", Store::kSchemaVersion,
                  " that this build understands; run a newer Anvil (database ", path, ")");
      ANVIL_CHECK(version >= 1, "job store: expected schema version ", Store::kSchemaVersion, ", got ", version,
                  " (database ", path, ")");
    }
    for (int64_t v = version; v < Store::kSchemaVersion; ++v) {
      exec(detail::StrCat("migrate the schema to version ", v + 1), kMigrations[static_cast<size_t>(v)]);
    }
    if (version == 0) {
      Statement insert(db.get(), path, "record the schema version", "INSERT INTO schema_version (version) VALUES (?1)");
      Query(insert).bind(1, Store::kSchemaVersion).run();
    } else if (version < Store::kSchemaVersion) {
      Statement update(db.get(), path, "record the schema version", "UPDATE schema_version SET version = ?1");
      Query(update).bind(1, Store::kSchemaVersion).run();
    }
    tx.commit();
  }

  std::string new_job_id() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    static constexpr char kHex[] = "0123456789abcdef";
    const uint64_t bits = rng();
    std::string id = "job-";
    for (int i = 0; i < 12; ++i) id += kHex[(bits >> (4 * i)) & 0xf];
    return id;
  }

  bool job_id_taken(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Query q(st->job_id_taken);
    q.bind(1, id);
    return q.next();
  }

  std::vector<JobRow> read_jobs(Query& q) {
    std::vector<JobRow> out;
    while (q.next()) out.push_back(read_job(q));
    return out;
  }
};

SqliteStore::SqliteStore(const std::string& db_path, int64_t max_pages)
    : impl_(std::make_unique<Impl>(db_path, max_pages)) {}
SqliteStore::~SqliteStore() = default;

const std::string& SqliteStore::path() const { return impl_->path; }

std::pair<JobRow, bool> SqliteStore::insert_job(JobRow row) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Transaction tx(m.db.get(), m.path, "inserting a job");
  if (!row.client_job_id.empty()) {
    Query q(m.st->job_by_client_id);
    q.bind(1, row.client_job_id);
    if (q.next()) {
      JobRow existing = read_job(q);
      return {std::move(existing), false};  // nothing written: the rollback is a no-op
    }
  }
  if (row.id.empty()) {
    // 48 random bits: a clash is rare but possible, so draw again until the id is free.
    do {
      row.id = m.new_job_id();
    } while (m.job_id_taken(row.id));
  } else {
    ANVIL_CHECK(!m.job_id_taken(row.id), "insert_job: expected a new job id, got '", row.id,
                "' which already exists (database ", m.path, ")");
  }
  if (row.created_ms == 0) row.created_ms = unix_millis();
  {
    Query q(m.st->insert_job);
    q.bind(1, row.id).bind(2, row.name);
    if (row.client_job_id.empty()) {
      q.bind_null(3);  // NULLs are exempt from UNIQUE; "" would allow only one job without a client id
    } else {
      q.bind(3, row.client_job_id);
    }
    q.bind(4, row.spec_json).bind(5, job_state_name(row.state)).bind(6, row.reason).bind(7, row.priority);
    q.bind(8, row.device).bind(9, row.created_ms).bind(10, row.started_ms).bind(11, row.finished_ms);
    q.bind(12, row.step).bind(13, row.epoch).bind(14, row.checkpoint).bind(15, row.model_name);
    q.bind(16, row.model_version);
    q.run();
  }
  row.seq = sqlite3_last_insert_rowid(m.db.get());
  tx.commit();
  return {std::move(row), true};
}

std::optional<JobRow> SqliteStore::get_job(const std::string& id) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->job_by_id);
  q.bind(1, id);
  if (!q.next()) return std::nullopt;
  return read_job(q);
}

std::optional<JobRow> SqliteStore::get_job_by_client_id(const std::string& client_job_id) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->job_by_client_id);
  q.bind(1, client_job_id);
  if (!q.next()) return std::nullopt;
  return read_job(q);
}

std::map<JobState, int64_t> SqliteStore::count_jobs_by_state() const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->count_jobs);
  std::map<JobState, int64_t> counts;
  while (q.next()) counts[parse_job_state(q.text(0))] = q.integer(1);
  return counts;
}

std::vector<JobRow> SqliteStore::list_jobs(const std::vector<JobState>& states, int64_t limit,
                                           int64_t before_seq) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->list_jobs);
  q.bind(1, int64_t{states.empty() ? 1 : 0});
  bind_states(q, 2, states);
  q.bind(8, limit > 0 ? limit : int64_t{-1});  // a negative LIMIT is SQLite's "no limit"
  q.bind(9, before_seq > 0 ? before_seq : int64_t{0});
  return impl_->read_jobs(q);
}

std::vector<std::string> SqliteStore::expired_jobs(int64_t keep, int64_t finished_before_ms) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->expired_jobs);
  q.bind(1, keep).bind(2, finished_before_ms);
  std::vector<std::string> out;
  while (q.next()) out.push_back(q.text(0));
  return out;
}

bool SqliteStore::delete_job(const std::string& id) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Transaction tx(m.db.get(), m.path, "deleting a job");
  Query(m.st->delete_metrics).bind(1, id).run();
  Query(m.st->delete_job).bind(1, id).run();
  const bool deleted = sqlite3_changes(m.db.get()) == 1;
  tx.commit();
  return deleted;
}

std::vector<JobRow> SqliteStore::jobs_in_states(const std::vector<JobState>& states) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->jobs_in_states);
  bind_states(q, 1, states);
  return impl_->read_jobs(q);
}

bool SqliteStore::update_job(const JobRow& row, int64_t fence_epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  {
    Query q(m.st->update_job);
    bind_mutable(q, row);
    q.bind(15, fence_epoch);
    q.run();
  }
  if (sqlite3_changes(m.db.get()) == 1) return true;
  ANVIL_CHECK(fence_epoch > 0 && m.job_id_taken(row.id), "update_job: expected an existing job id, got '", row.id,
              "' (database ", m.path, ")");
  return false;
}

int64_t SqliteStore::append_metric(MetricRow row, int64_t fence_epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Transaction tx(m.db.get(), m.path, "appending a metric event");
  Query(m.st->bump_metric_seq).bind(1, row.job_id).bind(2, fence_epoch).run();
  if (sqlite3_changes(m.db.get()) != 1) {
    ANVIL_CHECK(m.job_id_taken(row.job_id), "append_metric: expected an existing job id, got '", row.job_id,
                "' (database ", m.path, ")");
    throw StoreError(detail::StrCat("job store: an event of job ", row.job_id, " under lease epoch ", fence_epoch,
                                    " was refused: another replica has taken the job over (database ", m.path, ")"),
                     StoreError::Kind::kFenced);
  }
  {
    Query q(m.st->read_metric_seq);
    q.bind(1, row.job_id);
    q.next();
    row.seq = q.integer(0);
  }
  if (row.time_ms == 0) row.time_ms = unix_millis();
  Query(m.st->insert_metric)
      .bind(1, row.job_id)
      .bind(2, row.seq)
      .bind(3, row.step)
      .bind(4, row.kind)
      .bind(5, row.payload_json)
      .bind(6, row.time_ms)
      .run();
  tx.commit();
  return row.seq;
}

std::vector<MetricRow> SqliteStore::metrics(const std::string& job_id, int64_t from_step, int64_t after_seq,
                                            int64_t limit) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->metrics);
  q.bind(1, job_id).bind(2, from_step).bind(3, after_seq).bind(4, limit > 0 ? limit : int64_t{-1});
  std::vector<MetricRow> out;
  while (q.next()) out.push_back(read_metric(q));
  return out;
}

std::vector<MetricRow> SqliteStore::metrics_of_kind(const std::string& job_id, const std::string& kind) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->metrics_of_kind);
  q.bind(1, job_id).bind(2, kind);
  std::vector<MetricRow> out;
  while (q.next()) out.push_back(read_metric(q));
  return out;
}

void SqliteStore::truncate_metrics_after(const std::string& job_id, int64_t step) {
  MutexLock lock(&impl_->mu);
  Query(impl_->st->truncate_metrics).bind(1, job_id).bind(2, step).run();
}

ModelRow SqliteStore::register_model(ModelRow row) {
  ANVIL_CHECK(!row.name.empty(), "register_model: expected a model name, got an empty one (database ", impl_->path,
              ")");
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Transaction tx(m.db.get(), m.path, "registering a model");
  {
    Query q(m.st->next_model_version);
    q.bind(1, row.name);
    q.next();
    row.version = q.integer(0);
  }
  if (row.created_ms == 0) row.created_ms = unix_millis();
  Query(m.st->insert_model)
      .bind(1, row.name)
      .bind(2, row.version)
      .bind(3, row.job_id)
      .bind(4, row.path)
      .bind(5, row.signature_json)
      .bind(6, row.created_ms)
      .run();
  tx.commit();
  return row;
}

std::optional<ModelRow> SqliteStore::get_model(const std::string& name, int64_t version) const {
  MutexLock lock(&impl_->mu);
  Query q(version > 0 ? impl_->st->model_version : impl_->st->model_latest);
  q.bind(1, name);
  if (version > 0) q.bind(2, version);
  if (!q.next()) return std::nullopt;
  return read_model(q);
}

std::vector<ModelRow> SqliteStore::list_models(const std::string& name, int64_t limit, const std::string& after_name,
                                               int64_t after_version) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->list_models);
  q.bind(1, name).bind(2, after_name).bind(3, after_version).bind(4, limit > 0 ? limit : int64_t{-1});
  std::vector<ModelRow> out;
  while (q.next()) out.push_back(read_model(q));
  return out;
}

std::vector<ModelRow> SqliteStore::recent_models(int64_t limit) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->recent_models);
  q.bind(1, limit > 0 ? limit : int64_t{-1});
  std::vector<ModelRow> out;
  while (q.next()) out.push_back(read_model(q));
  return out;
}

std::optional<JobRow> SqliteStore::claim_job(const std::string& owner, int64_t lease_ms,
                                             const std::function<bool(const JobRow&)>& fits) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  // BEGIN IMMEDIATE: the one writer; no other connection claims between the read and the update.
  Transaction tx(m.db.get(), m.path, "claiming a job");
  std::optional<JobRow> chosen;
  {
    Query q(m.st->claimable);
    while (q.next()) {
      JobRow row;  // the claim candidate's few fields (store.h)
      row.id = q.text(0);
      row.device = q.text(1);
      row.priority = q.integer(2);
      row.seq = q.integer(3);
      if (fits(row)) {
        chosen = std::move(row);
        break;
      }
    }
  }
  if (!chosen) return std::nullopt;
  const int64_t now = unix_millis();
  Query(m.st->claim).bind(1, chosen->id).bind(2, owner).bind(3, now + lease_ms).run();
  Query(m.st->record_claim).bind(1, chosen->id).bind(2, now).run();
  Query q(m.st->job_by_id);
  q.bind(1, chosen->id);
  q.next();
  JobRow claimed = read_job(q);
  tx.commit();
  return claimed;
}

LeaseRenewal SqliteStore::renew_leases(const std::string& owner,
                                       const std::vector<std::pair<std::string, int64_t>>& held, int64_t lease_ms) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  LeaseRenewal out;
  if (held.empty()) return out;
  Transaction tx(m.db.get(), m.path, "renewing leases");
  const int64_t until = unix_millis() + lease_ms;
  for (const auto& [id, epoch] : held) {
    Query q(m.st->renew);
    q.bind(1, id).bind(2, owner).bind(3, epoch).bind(4, until);
    if (!q.next()) {
      out.lost.push_back(id);
    } else if (q.integer(0) != 0) {
      out.cancel_requested.push_back(id);
    }
  }
  tx.commit();
  return out;
}

std::vector<JobRow> SqliteStore::lapsed_leases(int64_t grace_ms) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->lapsed);
  q.bind(1, unix_millis() - grace_ms);
  return impl_->read_jobs(q);
}

bool SqliteStore::update_job_fenced(const JobRow& row, int64_t epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Query q(m.st->update_fenced);
  bind_mutable(q, row);
  q.bind(15, row.owner).bind(16, row.lease_epoch).bind(17, row.lease_expires_ms);
  q.bind(18, int64_t{row.cancel_requested ? 1 : 0}).bind(19, epoch);
  q.run();
  return sqlite3_changes(m.db.get()) == 1;
}

bool SqliteStore::request_cancel(const std::string& id) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  Query(m.st->request_cancel).bind(1, id).run();
  return sqlite3_changes(m.db.get()) == 1;
}

std::vector<ClaimRow> SqliteStore::claims(const std::string& job_id) const {
  MutexLock lock(&impl_->mu);
  Query q(impl_->st->claims);
  q.bind(1, job_id);
  std::vector<ClaimRow> out;
  while (q.next()) out.push_back(ClaimRow{q.text(0), q.integer(1), q.text(2), q.integer(3)});
  return out;
}

}  // namespace anvil::server
