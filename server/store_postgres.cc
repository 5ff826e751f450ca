// The PostgreSQL engine of the store: see store_postgres.h.
#include "server/store_postgres.h"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <random>
#include <thread>

#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::server {
namespace {

// Advisory-lock keys (pg_advisory_lock's two-int form: a class, then an object), chosen once and
// never reused for anything else: "ANVL" as the class.
constexpr int32_t kLockClass = 0x414e564c;
constexpr int32_t kMigrationLock = 1;  // held by the transaction that checks and migrates the schema
// The class of the per-model-name locks (the object is the name's hash): "ANVM".
constexpr int32_t kModelLockClass = 0x414e564d;

// Type OIDs of the parameters (pg_type.h): fixed since PostgreSQL 7.
constexpr Oid kInt8 = 20;
constexpr Oid kText = 25;
constexpr Oid kTextArray = 1009;
constexpr Oid kInt8Array = 1016;

// The same versions as the SQLite engine's (store_sqlite.cc), in PostgreSQL's dialect.
// `jobs.metric_seq` is the last seq handed out for the job's metric stream, kept apart from the
// metrics so that deleting events never lets a seq be handed out twice.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE schema_version (version BIGINT NOT NULL);
CREATE TABLE jobs (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  client_job_id TEXT UNIQUE,
  spec_json TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  priority BIGINT NOT NULL,
  device TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  started_ms BIGINT NOT NULL,
  finished_ms BIGINT NOT NULL,
  step BIGINT NOT NULL,
  epoch BIGINT NOT NULL,
  checkpoint TEXT NOT NULL,
  model_name TEXT NOT NULL,
  model_version BIGINT NOT NULL,
  metric_seq BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE TABLE metrics (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  step BIGINT NOT NULL,
  kind TEXT NOT NULL,
  payload_json TEXT NOT NULL,
  time_ms BIGINT NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE INDEX metrics_by_step ON metrics (job_id, step);
CREATE TABLE models (
  name TEXT NOT NULL,
  version BIGINT NOT NULL,
  job_id TEXT NOT NULL,
  path TEXT NOT NULL,
  signature_json TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  PRIMARY KEY (name, version)
);
)sql";
constexpr const char* kSchemaV2 = "ALTER TABLE jobs ADD COLUMN crashes BIGINT NOT NULL DEFAULT 0;";
constexpr const char* kSchemaV3 = "ALTER TABLE jobs ADD COLUMN crash_step BIGINT NOT NULL DEFAULT -1;";
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN lease_expires_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN cancel_requested BIGINT NOT NULL DEFAULT 0;
CREATE TABLE claims (
  n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  epoch BIGINT NOT NULL,
  owner TEXT NOT NULL,
  claimed_ms BIGINT NOT NULL,
  UNIQUE (job_id, epoch)
);
)sql";
// Version 5: the rendezvous of data-parallel ranks (workers/pg_rendezvous.h): Gloo's store,
// keyed by job and attempt.
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE rendezvous (
  key TEXT PRIMARY KEY,
  value BYTEA NOT NULL,
  created_ms BIGINT NOT NULL
);
)sql";
// Version 6: nodes 1.. of data-parallel jobs that span replicas (Store::open_parts). One attempt's
// parts at a time per job: opening an attempt replaces the rows of the one before.
constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE job_parts (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  epoch BIGINT NOT NULL,
  attempt INTEGER NOT NULL,
  node INTEGER NOT NULL,
  nnodes INTEGER NOT NULL,
  nproc INTEGER NOT NULL,
  checkpoint TEXT NOT NULL,
  state TEXT NOT NULL,
  owner TEXT NOT NULL DEFAULT '',
  lease_expires_ms BIGINT NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, node)
);
CREATE INDEX job_parts_open ON job_parts (state);
)sql";
constexpr std::array<const char*, 6> kMigrations = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5, kSchemaV6};

// The database's clock in unix ms: leases are measured by it, so that replicas whose clocks
// disagree still agree on when a lease lapses.
#define ANVIL_PG_NOW_MS "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
static_assert(kMigrations.size() == Store::kSchemaVersion);

#define ANVIL_PG_JOB_COLUMNS                                                                                   \
  "id, name, client_job_id, spec_json, state, reason, priority, device, created_ms, started_ms, finished_ms, " \
  "step, epoch, checkpoint, model_name, model_version, seq, crashes, crash_step, owner, lease_epoch, "         \
  "lease_expires_ms, cancel_requested"
// The rest of a claim after its `free` row: take it, and record the claim, in one statement.
#define ANVIL_PG_CLAIM_TAIL                                                                                            \
  "taken AS (UPDATE jobs j SET state = 'RUNNING', owner = $2, lease_epoch = j.lease_epoch + 1, "                       \
  "lease_expires_ms = " ANVIL_PG_NOW_MS                                                                                \
  " + $3 FROM free WHERE j.id = free.id RETURNING j.*), "                                                              \
  "recorded AS (INSERT INTO claims (job_id, epoch, owner, claimed_ms) SELECT id, lease_epoch, owner, " ANVIL_PG_NOW_MS \
  " FROM taken) SELECT " ANVIL_PG_JOB_COLUMNS " FROM taken"
#define ANVIL_PG_METRIC_COLUMNS "job_id, seq, step, kind, payload_json, time_ms"
#define ANVIL_PG_MODEL_COLUMNS "name, version, job_id, path, signature_json, created_ms"

struct ClearResult {
  void operator()(PGresult* r) const { PQclear(r); }
};
struct FinishConn {
  void operator()(PGconn* c) const { PQfinish(c); }
};

// A statement's parameters. Text goes in binary format with its length, so a NUL byte reaches
// the server (which refuses it) instead of silently ending the string; integers go as decimal
// text. Every parameter's type is given, so no statement depends on the server's inference.
class Params {
 public:
  Params& add(int64_t v) {
    push(std::to_string(v), kInt8, 0);
    return *this;
  }
  Params& add(std::string_view v) {
    push(std::string(v), kText, 1);
    return *this;
  }
  Params& add(const std::string& v) { return add(std::string_view(v)); }
  Params& add(const char* v) { return add(std::string_view(v)); }
  Params& add_null_text() {
    storage_.emplace_back();
    null_.push_back(true);
    types_.push_back(kText);
    formats_.push_back(0);
    return *this;
  }
  // A text[] in its text form, "{A,B}": for job state names only (no quoting needed). Empty
  // `names` with `null_when_empty` binds NULL.
  Params& add_names(const std::vector<std::string_view>& names, bool null_when_empty) {
    if (names.empty() && null_when_empty) {
      storage_.emplace_back();
      null_.push_back(true);
      types_.push_back(kTextArray);
      formats_.push_back(0);
      return *this;
    }
    std::string v = "{";
    for (size_t i = 0; i < names.size(); ++i) v += (i ? "," : "") + std::string(names[i]);
    push(v + "}", kTextArray, 0);
    return *this;
  }

  // An array in its text form, each element double-quoted (and its quotes and backslashes
  // escaped): {"a","b"}.
  Params& add_array(const std::vector<std::string>& values, Oid type) {
    std::string v = "{";
    for (size_t i = 0; i < values.size(); ++i) {
      v += i ? ",\"" : "\"";
      for (char c : values[i]) {
        if (c == '"' || c == '\\') v += '\\';
        v += c;
      }
      v += '"';
    }
    push(v + "}", type, 0);
    return *this;
  }

  int size() const { return static_cast<int>(storage_.size()); }
  const Oid* types() const { return types_.data(); }
  const int* formats() const { return formats_.data(); }
  // Pointers into storage: valid until the next add.
  void pointers(std::vector<const char*>& values, std::vector<int>& lengths) const {
    values.clear();
    lengths.clear();
    for (size_t i = 0; i < storage_.size(); ++i) {
      values.push_back(null_[i] ? nullptr : storage_[i].data());
      lengths.push_back(static_cast<int>(storage_[i].size()));
    }
  }

 private:
  void push(std::string v, Oid type, int format) {
    storage_.push_back(std::move(v));
    null_.push_back(false);
    types_.push_back(type);
    formats_.push_back(format);
  }
  std::vector<std::string> storage_;
  std::vector<bool> null_;
  std::vector<Oid> types_;
  std::vector<int> formats_;
};

// A statement's result (text format).
class Result {
 public:
  explicit Result(PGresult* r) : r_(r) {}
  int rows() const { return PQntuples(r_.get()); }
  std::string text(int row, int col) const {
    return std::string(PQgetvalue(r_.get(), row, col), static_cast<size_t>(PQgetlength(r_.get(), row, col)));
  }
  bool is_null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  int64_t integer(int row, int col) const {
    const char* v = PQgetvalue(r_.get(), row, col);
    const char* end = v + PQgetlength(r_.get(), row, col);
    int64_t out = 0;
    const auto [p, ec] = std::from_chars(v, end, out);
    ANVIL_CHECK(ec == std::errc() && p == end, "job store: expected an integer from PostgreSQL, got '",
                std::string_view(v, static_cast<size_t>(end - v)), "'");
    return out;
  }
  bool boolean(int row, int col) const { return PQgetvalue(r_.get(), row, col)[0] == 't'; }
  // Rows an INSERT, UPDATE or DELETE touched.
  int64_t affected() const {
    const char* n = PQcmdTuples(r_.get());
    return n[0] ? std::stoll(n) : 0;
  }

 private:
  std::unique_ptr<PGresult, ClearResult> r_;
};

JobRow read_job(const Result& q, int i) {
  JobRow r;
  r.id = q.text(i, 0);
  r.name = q.text(i, 1);
  r.client_job_id = q.is_null(i, 2) ? "" : q.text(i, 2);
  r.spec_json = q.text(i, 3);
  r.state = parse_job_state(q.text(i, 4));
  r.reason = q.text(i, 5);
  r.priority = q.integer(i, 6);
  r.device = q.text(i, 7);
  r.created_ms = q.integer(i, 8);
  r.started_ms = q.integer(i, 9);
  r.finished_ms = q.integer(i, 10);
  r.step = q.integer(i, 11);
  r.epoch = q.integer(i, 12);
  r.checkpoint = q.text(i, 13);
  r.model_name = q.text(i, 14);
  r.model_version = q.integer(i, 15);
  r.seq = q.integer(i, 16);
  r.crashes = q.integer(i, 17);
  r.crash_step = q.integer(i, 18);
  r.owner = q.text(i, 19);
  r.lease_epoch = q.integer(i, 20);
  r.lease_expires_ms = q.integer(i, 21);
  r.cancel_requested = q.integer(i, 22) != 0;
  return r;
}

std::vector<JobRow> read_jobs(const Result& q) {
  std::vector<JobRow> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(read_job(q, i));
  return out;
}

MetricRow read_metric(const Result& q, int i) {
  return MetricRow{q.text(i, 0), q.integer(i, 1), q.integer(i, 2), q.text(i, 3), q.text(i, 4), q.integer(i, 5)};
}

ModelRow read_model(const Result& q, int i) {
  return ModelRow{q.text(i, 0), q.integer(i, 1), q.text(i, 2), q.text(i, 3), q.text(i, 4), q.integer(i, 5)};
}

// The job's id and the fields update_job writes, as parameters $1-$14 (the order of the update
// statements' SET lists).
Params mutable_params(const JobRow& row) {
  Params p;
  p.add(row.id).add(job_state_name(row.state)).add(row.reason).add(row.priority).add(row.device);
  p.add(row.started_ms).add(row.finished_ms).add(row.step).add(row.epoch).add(row.checkpoint);
  p.add(row.model_name).add(row.model_version).add(row.crashes).add(row.crash_step);
  return p;
}

std::vector<std::string_view> state_names(const std::vector<JobState>& states) {
  std::vector<std::string_view> out;
  for (JobState s : states) out.push_back(job_state_name(s));
  return out;
}

// "postgresql://user@host:port/db" from the URL's own fields: the password never reaches a
// message or a log.
std::string display_location(const std::string& url) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (opts == nullptr) {
    std::string why = err ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw Error("job store: expected a PostgreSQL URL (postgresql://user@host:port/database), got one libpq " +
                std::string("refuses: ") + why);
  }
  std::string user, host, port, db;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    const std::string key = o->keyword;
    const std::string value = o->val ? o->val : "";
    if (key == "user") user = value;
    if (key == "host" || (key == "hostaddr" && host.empty())) host = value;
    if (key == "port") port = value;
    if (key == "dbname") db = value;
  }
  PQconninfoFree(opts);
  std::string out = "postgresql://";
  if (!user.empty()) out += user + "@";
  out += host.empty() ? "localhost" : host;
  if (!port.empty()) out += ":" + port;
  return out + "/" + db;
}

// A new connection (check PQstatus): anvild's defaults first, the URL last, so that what the
// URL itself says wins (expand_dbname expands it in place, and a later setting of a keyword
// overrides an earlier one).
PGconn* open_connection(const std::string& url, const PostgresStore::Options& options) {
  std::vector<const char*> keys = {"fallback_application_name", "connect_timeout"};
  std::vector<std::string> values = {"anvild", std::to_string(options.connect_timeout_s)};
  if (options.io_timeout_ms > 0) {
    const int idle_s = std::max(1, options.io_timeout_ms / 3000);
    for (const auto& [key, value] :
         {std::pair<const char*, std::string>{"tcp_user_timeout", std::to_string(options.io_timeout_ms)},
          {"keepalives", "1"},
          {"keepalives_idle", std::to_string(idle_s)},
          {"keepalives_interval", std::to_string(idle_s)},
          {"keepalives_count", "2"}}) {
      keys.push_back(key);
      values.push_back(value);
    }
  }
  keys.push_back("dbname");
  values.push_back(url);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  keys.push_back(nullptr);
  pointers.push_back(nullptr);
  return PQconnectdbParams(keys.data(), pointers.data(), /*expand_dbname=*/1);
}

// SQLSTATE classes that mean the connection or the server went away, not that the statement
// was wrong: 08 (connection exception), 57P01..57P03 (shutdown, crash, starting up).
bool connection_lost(std::string_view sqlstate) {
  return sqlstate.rfind("08", 0) == 0 || sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03";
}

}  // namespace

struct PostgresStore::Impl {
  std::string url;      // as given, with any password: only ever handed to libpq
  std::string display;  // for messages
  Options options;
  mutable Mutex mu;
  // The connection: replaced (reset) on the first use after it was lost.
  std::unique_ptr<PGconn, FinishConn> conn ABSL_GUARDED_BY(mu);
  std::mt19937_64 rng ABSL_GUARDED_BY(mu){std::random_device{}()};

  Impl(std::string u, Options o) : url(std::move(u)), display(display_location(url)), options(o) {
    MutexLock lock(&mu);
    connect();
    migrate();
  }

  [[noreturn]] void fail(std::string_view what, const PGresult* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    const std::string sqlstate = state ? state : "";
    std::string message = r ? PQresultErrorMessage(r) : "";
    if (message.empty()) message = PQerrorMessage(conn.get());
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    const bool lost = PQstatus(conn.get()) != CONNECTION_OK || connection_lost(sqlstate);
    const StoreError::Kind kind = lost                  ? StoreError::Kind::kIo
                                  : sqlstate == "53100" ? StoreError::Kind::kFull
                                                        : StoreError::Kind::kOther;
    throw StoreError(detail::StrCat("job store: ", what, " failed: ", message,
                                    sqlstate.empty() ? "" : " (SQLSTATE " + sqlstate + ")",
                                    lost ? "; the database is unreachable, the next request reconnects" : "",
                                    kind == StoreError::Kind::kFull ? " (free space on the database's volume)" : "",
                                    " (database ", display, ")"),
                     kind);
  }

  // Opens the connection, or reopens it when lost.
  void connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (conn && PQstatus(conn.get()) == CONNECTION_OK) return;
    if (conn) {
      PQreset(conn.get());
    } else {
      conn.reset(open_connection(url, options));
    }
    if (!conn) throw StoreError("job store: out of memory connecting to " + display, StoreError::Kind::kIo);
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      std::string why = PQerrorMessage(conn.get());
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      throw StoreError(detail::StrCat("job store: cannot connect to the PostgreSQL database ", display, ": ", why),
                       StoreError::Kind::kIo);
    }
    // Statements are short; one that waits on a lock for half a minute is a bug or a stuck peer.
    exec_raw("set the statement timeout", "SET statement_timeout = '30s'");
  }

  Result exec_raw(std::string_view what, const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    PGresult* r = PQexec(conn.get(), sql);
    const ExecStatusType status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      Result owned(r);
      fail(what, r);
    }
    return Result(r);
  }

  Result exec(std::string_view what, const char* sql, const Params& params = Params())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<const char*> values;
    std::vector<int> lengths;
    params.pointers(values, lengths);
    PGresult* r = PQexecParams(conn.get(), sql, params.size(), params.types(), values.data(), lengths.data(),
                               params.formats(), /*resultFormat=*/0);
    const ExecStatusType status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      Result owned(r);
      fail(what, r);
    }
    return Result(r);
  }

  // A transaction on the connection: rolled back unless committed, so an exception leaves the
  // database as it was. A ROLLBACK on a lost connection is moot (the server aborts it).
  class Transaction {
   public:
    Transaction(Impl& m, std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu) : m_(m), what_(what) {
      m_.exec(what_, "BEGIN");
    }
    ~Transaction() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (!done_) PQclear(PQexec(m_.conn.get(), "ROLLBACK"));
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      m_.exec(what_, "COMMIT");
      done_ = true;
    }

   private:
    Impl& m_;
    std::string_view what_;
    bool done_ = false;
  };

  void migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Transaction tx(*this, "checking the schema");
    // Replicas starting together: the first migrates, the others wait here and find it done.
    exec("wait for the schema lock", "SELECT pg_advisory_xact_lock($1::int, $2::int)",
         Params().add(int64_t{kLockClass}).add(int64_t{kMigrationLock}));
    Result has = exec("check the schema", "SELECT to_regclass('schema_version') IS NOT NULL");
    int64_t version = 0;
    if (!has.boolean(0, 0)) {
      Result tables = exec("check the schema",
                           "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()");
      ANVIL_CHECK(tables.integer(0, 0) == 0, "job store: expected an Anvil store or an empty database, got ",
                  tables.integer(0, 0), " table(s) but no schema_version table in its schema (database ", display, ")");
    } else {
      Result read = exec("read the schema version", "SELECT MAX(version) FROM schema_version");
      version = read.is_null(0, 0) ? 0 : read.integer(0, 0);
      ANVIL_CHECK(version <= Store::kSchemaVersion, "job store: the database has schema version ", version,
                  ", newer than version ", Store::kSchemaVersion,
                  " that this build understands; run a newer Anvil (database ", display, ")");
      ANVIL_CHECK(version >= 1, "job store: expected schema version ", Store::kSchemaVersion, ", got ", version,
                  " (database ", display, ")");
    }
    for (int64_t v = version; v < Store::kSchemaVersion; ++v) {
      exec_raw(detail::StrCat("migrate the schema to version ", v + 1), kMigrations[static_cast<size_t>(v)]);
    }
    if (version == 0) {
      exec("record the schema version", "INSERT INTO schema_version (version) VALUES ($1)",
           Params().add(Store::kSchemaVersion));
    } else if (version < Store::kSchemaVersion) {
      exec("record the schema version", "UPDATE schema_version SET version = $1", Params().add(Store::kSchemaVersion));
    }
    tx.commit();
  }

  // Tells every watching replica (PostgresWatch) of a change: best effort after the change
  // committed; a lost notice is covered by the replicas' polling.
  void notify(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    PQclear(PQexecParams(conn.get(), "SELECT pg_notify('anvil', $1)", 1, nullptr, &what, nullptr, nullptr, 0));
  }

  std::string new_job_id() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    static constexpr char kHex[] = "0123456789abcdef";
    const uint64_t bits = rng();
    std::string id = "job-";
    for (int i = 0; i < 12; ++i) id += kHex[(bits >> (4 * i)) & 0xf];
    return id;
  }
};

PostgresStore::PostgresStore(const std::string& url, Options options) : impl_(std::make_unique<Impl>(url, options)) {}
PostgresStore::~PostgresStore() = default;

const std::string& PostgresStore::path() const { return impl_->display; }

std::pair<JobRow, bool> PostgresStore::insert_job(JobRow row) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  if (!row.client_job_id.empty()) {
    Result q =
        m.exec("look up a job by client_job_id", "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE client_job_id = $1",
               Params().add(row.client_job_id));
    if (q.rows() == 1) return {read_job(q, 0), false};
  }
  const bool generated = row.id.empty();
  if (row.created_ms == 0) row.created_ms = unix_millis();
  // One statement, so it is atomic by itself. ON CONFLICT DO NOTHING covers both unique keys:
  // a generated id that clashes (48 random bits: rare) draws again; a client_job_id that another
  // replica inserted since the lookup above returns that job.
  for (int attempt = 0;; ++attempt) {
    if (generated) row.id = m.new_job_id();
    Params p;
    p.add(row.id).add(row.name);
    if (row.client_job_id.empty()) {
      p.add_null_text();  // NULLs are exempt from UNIQUE; "" would allow only one job without a client id
    } else {
      p.add(row.client_job_id);
    }
    p.add(row.spec_json).add(job_state_name(row.state)).add(row.reason).add(row.priority).add(row.device);
    p.add(row.created_ms).add(row.started_ms).add(row.finished_ms).add(row.step).add(row.epoch);
    p.add(row.checkpoint).add(row.model_name).add(row.model_version).add(row.crashes).add(row.crash_step);
    Result q = m.exec("insert a job",
                      "INSERT INTO jobs (id, name, client_job_id, spec_json, state, reason, priority, device, "
                      "created_ms, started_ms, finished_ms, step, epoch, checkpoint, model_name, model_version, "
                      "crashes, crash_step) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, "
                      "$16, $17, $18) ON CONFLICT DO NOTHING RETURNING seq",
                      p);
    if (q.rows() == 1) {
      row.seq = q.integer(0, 0);
      m.notify("queued");
      return {std::move(row), true};
    }
    if (!row.client_job_id.empty()) {
      Result e =
          m.exec("look up a job by client_job_id", "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE client_job_id = $1",
                 Params().add(row.client_job_id));
      if (e.rows() == 1) return {read_job(e, 0), false};
    }
    ANVIL_CHECK(generated, "insert_job: expected a new job id, got '", row.id, "' which already exists (database ",
                m.display, ")");
    ANVIL_CHECK(attempt < 16, "insert_job: 16 generated job ids in a row were taken (database ", m.display, ")");
  }
}

std::optional<JobRow> PostgresStore::get_job(const std::string& id) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("read a job", "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE id = $1", Params().add(id));
  if (q.rows() == 0) return std::nullopt;
  return read_job(q, 0);
}

std::optional<JobRow> PostgresStore::get_job_by_client_id(const std::string& client_job_id) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("look up a job by client_job_id",
                    "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE client_job_id = $1", Params().add(client_job_id));
  if (q.rows() == 0) return std::nullopt;
  return read_job(q, 0);
}

std::map<JobState, int64_t> PostgresStore::count_jobs_by_state() const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("count jobs by state", "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  std::map<JobState, int64_t> counts;
  for (int i = 0; i < q.rows(); ++i) counts[parse_job_state(q.text(i, 0))] = q.integer(i, 1);
  return counts;
}

std::vector<JobRow> PostgresStore::list_jobs(const std::vector<JobState>& states, int64_t limit,
                                             int64_t before_seq) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Params p;
  p.add_names(state_names(states), /*null_when_empty=*/true).add(before_seq > 0 ? before_seq : int64_t{0});
  // LIMIT NULL is LIMIT ALL.
  std::string sql = "SELECT " ANVIL_PG_JOB_COLUMNS
                    " FROM jobs WHERE ($1::text[] IS NULL OR state = ANY($1)) AND ($2 = 0 OR seq < $2) "
                    "ORDER BY seq DESC";
  if (limit > 0) {
    p.add(limit);
    sql += " LIMIT $3";
  }
  return read_jobs(m.exec("list jobs", sql.c_str(), p));
}

std::vector<std::string> PostgresStore::expired_jobs(int64_t keep, int64_t finished_before_ms) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("find expired jobs",
                    "SELECT id FROM (SELECT id, seq, finished_ms, ROW_NUMBER() OVER (ORDER BY seq DESC) AS newest "
                    "FROM jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS finished "
                    "WHERE ($1 > 0 AND newest > $1) OR finished_ms < $2 ORDER BY seq",
                    Params().add(keep).add(finished_before_ms));
  std::vector<std::string> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(q.text(i, 0));
  return out;
}

bool PostgresStore::delete_job(const std::string& id) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  // The metrics go with the job (ON DELETE CASCADE), in the same statement.
  return m.exec("delete a job", "DELETE FROM jobs WHERE id = $1", Params().add(id)).affected() == 1;
}

std::vector<JobRow> PostgresStore::jobs_in_states(const std::vector<JobState>& states) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  return read_jobs(m.exec("list jobs by state",
                          "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE state = ANY($1) ORDER BY seq ASC",
                          Params().add_names(state_names(states), /*null_when_empty=*/false)));
}

bool PostgresStore::update_job(const JobRow& row, int64_t fence_epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Params p = mutable_params(row);
  p.add(fence_epoch);
  Result q = m.exec("update a job",
                    "UPDATE jobs SET state = $2, reason = $3, priority = $4, device = $5, started_ms = $6, "
                    "finished_ms = $7, step = $8, epoch = $9, checkpoint = $10, model_name = $11, "
                    "model_version = $12, crashes = $13, crash_step = $14 WHERE id = $1 AND ($15 = 0 OR "
                    "lease_epoch = $15)",
                    p);
  if (q.affected() == 1) return true;
  const bool exists = m.exec("read a job", "SELECT 1 FROM jobs WHERE id = $1", Params().add(row.id)).rows() == 1;
  ANVIL_CHECK(fence_epoch > 0 && exists, "update_job: expected an existing job id, got '", row.id, "' (database ",
              m.display, ")");
  return false;
}

int64_t PostgresStore::append_metric(MetricRow row, int64_t fence_epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  if (row.time_ms == 0) row.time_ms = unix_millis();
  // One statement: the job's row lock (taken by the UPDATE) orders concurrent appends, and the
  // insert sees the seq that the update handed out.
  // The event commits without waiting for its WAL flush (synchronous_commit off for this
  // statement's own transaction, set in the statement): the durability of the embedded
  // store's SQLite with synchronous=NORMAL. A crash of anvild loses nothing; a crash of the
  // database server may lose its last fraction of a second of events, never a job's state, a
  // lease or a claim, which commit synchronously. A flush per event would cost nine tenths of
  // the rate (bench/RESULTS.md).
  Result q = m.exec(
      "append a metric event",
      "WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS sync), "
      "next AS (UPDATE jobs SET metric_seq = metric_seq + 1 WHERE id = $1 AND ($6 = 0 OR "
      "lease_epoch = $6) RETURNING metric_seq) "
      "INSERT INTO metrics (" ANVIL_PG_METRIC_COLUMNS
      ") SELECT $1, metric_seq, $2, $3, $4, $5 FROM next, async RETURNING seq",
      Params().add(row.job_id).add(row.step).add(row.kind).add(row.payload_json).add(row.time_ms).add(fence_epoch));
  if (q.rows() == 1) return q.integer(0, 0);
  Result exists = m.exec("read a job", "SELECT 1 FROM jobs WHERE id = $1", Params().add(row.job_id));
  ANVIL_CHECK(exists.rows() == 1, "append_metric: expected an existing job id, got '", row.job_id, "' (database ",
              m.display, ")");
  throw StoreError(detail::StrCat("job store: an event of job ", row.job_id, " under lease epoch ", fence_epoch,
                                  " was refused: another replica has taken the job over (database ", m.display, ")"),
                   StoreError::Kind::kFenced);
}

std::vector<MetricRow> PostgresStore::metrics(const std::string& job_id, int64_t from_step, int64_t after_seq,
                                              int64_t limit) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Params p;
  p.add(job_id).add(from_step).add(after_seq);
  std::string sql =
      "SELECT " ANVIL_PG_METRIC_COLUMNS " FROM metrics WHERE job_id = $1 AND step >= $2 AND seq > $3 ORDER BY seq";
  if (limit > 0) {
    p.add(limit);
    sql += " LIMIT $4";
  }
  Result q = m.exec("read metric events", sql.c_str(), p);
  std::vector<MetricRow> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(read_metric(q, i));
  return out;
}

std::vector<MetricRow> PostgresStore::metrics_of_kind(const std::string& job_id, const std::string& kind) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("read metric events of a kind",
                    "SELECT " ANVIL_PG_METRIC_COLUMNS " FROM metrics WHERE job_id = $1 AND kind = $2 ORDER BY seq",
                    Params().add(job_id).add(kind));
  std::vector<MetricRow> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(read_metric(q, i));
  return out;
}

void PostgresStore::truncate_metrics_after(const std::string& job_id, int64_t step) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  m.exec("truncate metric events", "DELETE FROM metrics WHERE job_id = $1 AND step > $2 AND kind IN ('step', 'epoch')",
         Params().add(job_id).add(step));
}

ModelRow PostgresStore::register_model(ModelRow row) {
  Impl& m = *impl_;
  ANVIL_CHECK(!row.name.empty(), "register_model: expected a model name, got an empty one (database ", m.display, ")");
  MutexLock lock(&m.mu);
  m.connect();
  if (row.created_ms == 0) row.created_ms = unix_millis();
  // Registrations of one name queue on an advisory lock keyed by the name, held to the commit,
  // so that the next version is read and taken atomically, also across replicas. (Retrying on
  // the primary key instead starves a replica that keeps losing the race.)
  Impl::Transaction tx(m, "registering a model");
  m.exec("wait for the model name's lock", "SELECT pg_advisory_xact_lock($1::int, hashtext($2))",
         Params().add(int64_t{kModelLockClass}).add(row.name));
  Result q = m.exec("register a model",
                    "INSERT INTO models (" ANVIL_PG_MODEL_COLUMNS
                    ") SELECT $1, COALESCE(MAX(version), 0) + 1, $2, $3, $4, $5 FROM models WHERE name = $1 "
                    "RETURNING version",
                    Params().add(row.name).add(row.job_id).add(row.path).add(row.signature_json).add(row.created_ms));
  row.version = q.integer(0, 0);
  tx.commit();
  // The other replicas load it before its first Predict reaches them (ModelRegistry::prefetch).
  const std::string notice = "model " + std::to_string(row.version) + " " + row.name;
  m.notify(notice.c_str());
  return row;
}

std::optional<ModelRow> PostgresStore::get_model(const std::string& name, int64_t version) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q =
      version > 0
          ? m.exec("read a model", "SELECT " ANVIL_PG_MODEL_COLUMNS " FROM models WHERE name = $1 AND version = $2",
                   Params().add(name).add(version))
          : m.exec("read a model's latest version",
                   "SELECT " ANVIL_PG_MODEL_COLUMNS " FROM models WHERE name = $1 ORDER BY version DESC LIMIT 1",
                   Params().add(name));
  if (q.rows() == 0) return std::nullopt;
  return read_model(q, 0);
}

std::vector<ModelRow> PostgresStore::list_models(const std::string& name, int64_t limit, const std::string& after_name,
                                                 int64_t after_version) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Params p;
  p.add(name).add(after_name).add(after_version);
  // COLLATE "C": the byte order SQLite uses, so both engines page models alike.
  std::string sql = "SELECT " ANVIL_PG_MODEL_COLUMNS
                    " FROM models WHERE ($1 = '' OR name = $1) AND (name COLLATE \"C\" > $2 OR (name = $2 AND "
                    "version > $3)) ORDER BY name COLLATE \"C\", version";
  if (limit > 0) {
    p.add(limit);
    sql += " LIMIT $4";
  }
  Result q = m.exec("list models", sql.c_str(), p);
  std::vector<ModelRow> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(read_model(q, i));
  return out;
}

std::vector<ModelRow> PostgresStore::recent_models(int64_t limit) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("list recent models",
                    "SELECT " ANVIL_PG_MODEL_COLUMNS
                    " FROM models ORDER BY created_ms DESC, name COLLATE \"C\", version DESC LIMIT $1",
                    Params().add(limit > 0 ? limit : int64_t{1} << 62));
  std::vector<ModelRow> out;
  for (int i = 0; i < q.rows(); ++i) out.push_back(read_model(q, i));
  return out;
}

std::optional<JobRow> PostgresStore::claim_job(const std::string& owner, int64_t lease_ms,
                                               const std::function<bool(const JobRow&)>& fits) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  // The candidates are read without locks; `fits` picks among them; then one statement takes
  // the first that fits, if no other replica claimed it meanwhile (the state check under the
  // row's lock), and records the claim in the same statement.
  std::vector<JobRow> candidates;  // each with the few fields `fits` sees (store.h)
  {
    Result q = m.exec("list claimable jobs",
                      "SELECT id, COALESCE(spec_json::json->>'device', device), priority, seq FROM jobs "
                      "WHERE state IN ('QUEUED', 'INTERRUPTED') AND cancel_requested = 0 "
                      "ORDER BY priority DESC, seq ASC");
    for (int i = 0; i < q.rows(); ++i) {
      JobRow c;
      c.id = q.text(i, 0);
      c.device = q.text(i, 1);
      c.priority = q.integer(i, 2);
      c.seq = q.integer(i, 3);
      candidates.push_back(std::move(c));
    }
  }
  // A candidate another transaction holds locked is skipped at first (SKIP LOCKED: a claim
  // never waits while another job is free). The lock may be a write that is not a claim (the
  // submitting replica appending the job's QUEUED event): when nothing else could be taken, the
  // skipped ones are tried again, waiting for the lock this time, and taken if still claimable.
  std::vector<const JobRow*> skipped;
  for (const bool wait : {false, true}) {
    const std::vector<const JobRow*> tries = [&] {
      std::vector<const JobRow*> out;
      if (wait) return skipped;
      for (const JobRow& c : candidates) {
        if (fits(c)) out.push_back(&c);
      }
      return out;
    }();
    for (const JobRow* c : tries) {
      Result q = m.exec("claim a job",
                        wait ? "WITH free AS (SELECT id FROM jobs WHERE id = $1 AND state IN ('QUEUED', 'INTERRUPTED') "
                               "AND cancel_requested = 0 FOR UPDATE), " ANVIL_PG_CLAIM_TAIL
                             : "WITH free AS (SELECT id FROM jobs WHERE id = $1 AND state IN ('QUEUED', 'INTERRUPTED') "
                               "AND cancel_requested = 0 FOR UPDATE SKIP LOCKED), " ANVIL_PG_CLAIM_TAIL,
                        Params().add(c->id).add(owner).add(lease_ms));
      if (q.rows() == 1) return read_job(q, 0);
      if (!wait) skipped.push_back(c);
    }
  }
  return std::nullopt;
}

LeaseRenewal PostgresStore::renew_leases(const std::string& owner,
                                         const std::vector<std::pair<std::string, int64_t>>& held, int64_t lease_ms) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  LeaseRenewal out;
  if (held.empty()) return out;
  m.connect();
  std::vector<std::string> ids, epochs;
  for (const auto& [id, epoch] : held) {
    ids.push_back(id);
    epochs.push_back(std::to_string(epoch));
  }
  Result q = m.exec("renew leases",
                    "UPDATE jobs SET lease_expires_ms = " ANVIL_PG_NOW_MS
                    " + $3 WHERE owner = $1 AND state = 'RUNNING' AND (id, lease_epoch) IN "
                    "(SELECT * FROM unnest($2::text[], $4::bigint[])) RETURNING id, cancel_requested",
                    Params().add(owner).add_array(ids, kTextArray).add(lease_ms).add_array(epochs, kInt8Array));
  std::vector<std::string> renewed;
  for (int i = 0; i < q.rows(); ++i) {
    renewed.push_back(q.text(i, 0));
    if (q.integer(i, 1) != 0) out.cancel_requested.push_back(q.text(i, 0));
  }
  for (const std::string& id : ids) {
    if (std::find(renewed.begin(), renewed.end(), id) == renewed.end()) out.lost.push_back(id);
  }
  return out;
}

std::vector<JobRow> PostgresStore::lapsed_leases(int64_t grace_ms) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  return read_jobs(m.exec("find lapsed leases",
                          "SELECT " ANVIL_PG_JOB_COLUMNS " FROM jobs WHERE state = 'RUNNING' AND owner <> '' AND "
                          "lease_expires_ms < " ANVIL_PG_NOW_MS " - $1 ORDER BY seq",
                          Params().add(grace_ms)));
}

bool PostgresStore::update_job_fenced(const JobRow& row, int64_t epoch) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Params p = mutable_params(row);
  p.add(row.owner).add(row.lease_epoch).add(row.lease_expires_ms).add(int64_t{row.cancel_requested ? 1 : 0}).add(epoch);
  const bool written =
      m.exec("update a job under its lease",
             "UPDATE jobs SET state = $2, reason = $3, priority = $4, device = $5, started_ms = $6, "
             "finished_ms = $7, step = $8, epoch = $9, checkpoint = $10, model_name = $11, model_version = $12, "
             "crashes = $13, crash_step = $14, owner = $15, lease_epoch = $16, lease_expires_ms = $17, "
             "cancel_requested = $18 WHERE id = $1 AND lease_epoch = $19",
             p)
          .affected() == 1;
  if (written && (row.state == JobState::kQueued || row.state == JobState::kInterrupted)) m.notify("queued");
  return written;
}

bool PostgresStore::request_cancel(const std::string& id) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  const bool asked = m.exec("ask for a cancel",
                            "UPDATE jobs SET cancel_requested = 1 WHERE id = $1 AND state NOT IN ('SUCCEEDED', "
                            "'FAILED', 'CANCELLED')",
                            Params().add(id))
                         .affected() == 1;
  if (asked) m.notify("cancel");
  return asked;
}

std::vector<ClaimRow> PostgresStore::claims(const std::string& job_id) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("read the claims",
                    "SELECT job_id, epoch, owner, claimed_ms FROM claims WHERE $1 = '' OR job_id = $1 ORDER BY n",
                    Params().add(job_id));
  std::vector<ClaimRow> out;
  for (int i = 0; i < q.rows(); ++i)
    out.push_back(ClaimRow{q.text(i, 0), q.integer(i, 1), q.text(i, 2), q.integer(i, 3)});
  return out;
}

#define ANVIL_PG_PART_COLUMNS \
  "p.job_id, p.epoch, p.attempt, p.node, p.nnodes, p.nproc, p.checkpoint, p.state, p.owner, p.reason"

namespace {
JobPart ReadPart(const Result& q, int i) {
  JobPart p;
  p.job_id = q.text(i, 0);
  p.epoch = q.integer(i, 1);
  p.attempt = static_cast<int>(q.integer(i, 2));
  p.node = static_cast<int>(q.integer(i, 3));
  p.nnodes = static_cast<int>(q.integer(i, 4));
  p.nproc = static_cast<int>(q.integer(i, 5));
  p.checkpoint = q.text(i, 6);
  p.state = q.text(i, 7);
  p.owner = q.text(i, 8);
  p.reason = q.text(i, 9);
  return p;
}
}  // namespace

bool PostgresStore::open_parts(const std::string& job_id, int64_t epoch, int attempt, int nnodes, int nproc,
                               const std::string& checkpoint) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  {
    Impl::Transaction tx(m, "open the parts of a data-parallel job");
    // The job's row lock orders this against a takeover (which moves lease_epoch).
    Result held = m.exec("open parts: check the lease",
                         "SELECT 1 FROM jobs WHERE id = $1 AND lease_epoch = $2 AND state = 'RUNNING' FOR UPDATE",
                         Params().add(job_id).add(epoch));
    if (held.rows() != 1) return false;
    m.exec("open parts: the attempt before", "DELETE FROM job_parts WHERE job_id = $1", Params().add(job_id));
    m.exec(
        "open parts",
        "INSERT INTO job_parts (job_id, epoch, attempt, node, nnodes, nproc, checkpoint, state) "
        "SELECT $1, $2, $3, n, $4, $5, $6, 'open' FROM generate_series(1, $4 - 1) AS n",
        Params().add(job_id).add(epoch).add(int64_t{attempt}).add(int64_t{nnodes}).add(int64_t{nproc}).add(checkpoint));
    tx.commit();
  }
  m.notify("queued");  // idle replicas look for work at once
  return true;
}

std::optional<JobPart> PostgresStore::claim_part(const std::string& owner, int64_t lease_ms, int max_nproc) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  // A part of a job this replica holds is left to others: its ranks would have been node 0's.
  Result q = m.exec("claim a part of a data-parallel job",
                    "WITH pick AS (SELECT p.job_id, p.node FROM job_parts p JOIN jobs j ON j.id = p.job_id "
                    "WHERE p.state = 'open' AND p.nproc <= $3 AND j.state = 'RUNNING' AND j.lease_epoch = p.epoch "
                    "AND j.owner <> $1 ORDER BY j.priority DESC, j.seq ASC, p.node ASC LIMIT 1 "
                    "FOR UPDATE OF p SKIP LOCKED) "
                    "UPDATE job_parts p SET state = 'running', owner = $1, lease_expires_ms = " ANVIL_PG_NOW_MS
                    " + $2 FROM pick WHERE p.job_id = pick.job_id AND p.node = pick.node "
                    "RETURNING " ANVIL_PG_PART_COLUMNS,
                    Params().add(owner).add(lease_ms).add(int64_t{max_nproc}));
  if (q.rows() != 1) return std::nullopt;
  return ReadPart(q, 0);
}

std::vector<JobPart> PostgresStore::renew_parts(const std::string& owner, const std::vector<JobPart>& held,
                                                int64_t lease_ms) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  std::vector<JobPart> lost;
  if (held.empty()) return lost;
  m.connect();
  std::vector<std::string> ids, epochs, attempts, nodes;
  for (const JobPart& p : held) {
    ids.push_back(p.job_id);
    epochs.push_back(std::to_string(p.epoch));
    attempts.push_back(std::to_string(p.attempt));
    nodes.push_back(std::to_string(p.node));
  }
  Result q = m.exec("renew the leases on parts",
                    "UPDATE job_parts p SET lease_expires_ms = " ANVIL_PG_NOW_MS
                    " + $3 FROM jobs j WHERE j.id = p.job_id AND p.owner = $1 AND p.state = 'running' "
                    "AND j.state = 'RUNNING' AND j.lease_epoch = p.epoch AND (p.job_id, p.epoch, p.attempt, p.node) IN "
                    "(SELECT a, b, c::integer, d::integer FROM unnest($2::text[], $4::bigint[], $5::bigint[], "
                    "$6::bigint[]) AS u(a, b, c, d)) RETURNING p.job_id, p.node",
                    Params()
                        .add(owner)
                        .add_array(ids, kTextArray)
                        .add(lease_ms)
                        .add_array(epochs, kInt8Array)
                        .add_array(attempts, kInt8Array)
                        .add_array(nodes, kInt8Array));
  for (const JobPart& p : held) {
    bool renewed = false;
    for (int i = 0; i < q.rows() && !renewed; ++i) {
      renewed = q.text(i, 0) == p.job_id && q.integer(i, 1) == p.node;
    }
    if (!renewed) lost.push_back(p);
  }
  return lost;
}

void PostgresStore::finish_part(const std::string& owner, const JobPart& part, bool ok, const std::string& reason) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  m.exec("record how a part ended",
         "UPDATE job_parts SET state = $5, reason = $6 WHERE job_id = $1 AND node = $2 AND attempt = $3 "
         "AND epoch = $4 AND owner = $7 AND state = 'running'",
         Params()
             .add(part.job_id)
             .add(int64_t{part.node})
             .add(int64_t{part.attempt})
             .add(part.epoch)
             .add(ok ? "done" : "failed")
             .add(reason)
             .add(owner));
}

std::vector<JobPart> PostgresStore::parts(const std::string& job_id, int64_t grace_ms) const {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  Result q = m.exec("read the parts of a data-parallel job",
                    "SELECT " ANVIL_PG_PART_COLUMNS ", (p.state = 'running' AND p.lease_expires_ms < " ANVIL_PG_NOW_MS
                    " - $2) FROM job_parts p WHERE p.job_id = $1 ORDER BY p.node",
                    Params().add(job_id).add(grace_ms));
  std::vector<JobPart> out;
  for (int i = 0; i < q.rows(); ++i) {
    out.push_back(ReadPart(q, i));
    out.back().lapsed = q.boolean(i, 10);
  }
  return out;
}

void PostgresStore::remove_parts(const std::string& job_id) {
  Impl& m = *impl_;
  MutexLock lock(&m.mu);
  m.connect();
  m.exec("remove the parts of a data-parallel job", "DELETE FROM job_parts WHERE job_id = $1", Params().add(job_id));
}

namespace {

// LISTEN anvil on a connection of its own; a thread waits on the socket (and an eventfd that
// ends it) and hands each notice's payload to the callback. A lost connection is reopened
// with backoff, and "reconnected" tells the callback that notices may have been missed.
class PostgresWatch final : public StoreWatch {
 public:
  PostgresWatch(std::string url, PostgresStore::Options options, std::function<void(std::string_view)> on_change)
      : url_(std::move(url)), options_(options), on_change_(std::move(on_change)) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ANVIL_CHECK(stop_fd_ >= 0, "job store: eventfd for the change watch failed");
    thread_ = std::thread([this] { Run(); });
  }
  ~PostgresWatch() override {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));
    thread_.join();
    ::close(stop_fd_);
  }

 private:
  // Waits up to `ms` for the socket (or the stop); false when stopping.
  bool Wait(int socket, int ms) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {socket, POLLIN, 0}};
    ::poll(fds, socket >= 0 ? 2 : 1, ms);
    return (fds[0].revents & POLLIN) == 0;
  }

  void Run() {
    std::unique_ptr<PGconn, FinishConn> conn;
    int backoff_ms = 100;
    for (;;) {
      if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
        conn.reset(open_connection(url_, options_));
        bool listening = conn && PQstatus(conn.get()) == CONNECTION_OK;
        if (listening) {
          PGresult* r = PQexec(conn.get(), "LISTEN anvil");
          listening = r != nullptr && PQresultStatus(r) == PGRES_COMMAND_OK;
          PQclear(r);
        }
        if (!listening) {
          conn.reset();
          if (!Wait(-1, backoff_ms)) return;
          backoff_ms = std::min(backoff_ms * 2, 5000);
          continue;
        }
        backoff_ms = 100;
        on_change_("reconnected");
      }
      if (!Wait(PQsocket(conn.get()), 1000)) return;
      if (PQconsumeInput(conn.get()) == 0) {  // the connection broke: reopen on the next turn
        conn.reset();
        continue;
      }
      while (PGnotify* n = PQnotifies(conn.get())) {
        const std::string payload = n->extra != nullptr ? n->extra : "";
        PQfreemem(n);
        on_change_(payload);
      }
    }
  }

  const std::string url_;
  const PostgresStore::Options options_;
  const std::function<void(std::string_view)> on_change_;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<StoreWatch> PostgresStore::watch(std::function<void(std::string_view)> on_change) {
  return std::make_unique<PostgresWatch>(impl_->url, impl_->options, std::move(on_change));
}

}  // namespace anvil::server
