// The job store, both engines: schema creation and reopening, migrations, idempotent submits,
// listing orders, job updates, metric streams (seqs, filters, truncation on resume), the model
// registry, concurrent appends, races between connections, and refusal of a newer schema or a
// foreign database. Every contract test runs against SQLite and against PostgreSQL (a server the
// suite starts in a temporary folder, a fresh database per test). Where the store's own reads
// could hide a bug, the database is inspected directly (SQLite's C API, libpq).
#include "server/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <regex>
#include <set>
#include <thread>

#include "core/util/clock.h"
#include "core/util/error.h"
#include "server/store_postgres.h"
#include "server/store_sqlite.h"
#include "tests/fixtures/postgres_server.h"
#include "tests/paths.h"

namespace anvil::server {
namespace {

using ::testing::HasSubstr;

// The message of the anvil::Error that f throws; a test failure when it throws nothing.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an anvil::Error";
  return "";
}

// Runs one SQL statement on the file, bypassing the store; returns the first column of the
// first row ("" when none).
std::string SqliteSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  std::string out;
  const int rc = sqlite3_step(stmt);
  EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(db);
  const unsigned char* text = rc == SQLITE_ROW ? sqlite3_column_text(stmt, 0) : nullptr;
  if (text) out = reinterpret_cast<const char*>(text);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// The same through libpq, on its own connection.
std::string PostgresSql(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  EXPECT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
  PGresult* r = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(r);
  EXPECT_TRUE(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) << sql << ": " << PQresultErrorMessage(r);
  std::string out = status == PGRES_TUPLES_OK && PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(conn);
  return out;
}

// Parameterised by engine: "sqlite" or "postgresql". The PostgreSQL server is started once for
// the whole program, on first use, and each test gets a database of its own.
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/anvil_store_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/anvil.db";
    if (postgres()) {
      static std::atomic<int> databases{0};
      database_ = "store_test_" + std::to_string(++databases);
      PostgresSql(Server().url(), "CREATE DATABASE " + database_);
      url_ = DatabaseUrl(database_);
    }
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    if (postgres()) PostgresSql(DatabaseUrl("postgres"), "DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)");
  }

  bool postgres() const {
    // The PostgreSQL-only fixture derives from this one without a parameter.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return info->value_param() == nullptr || GetParam() == "postgresql";
  }
  static test::PostgresServer& Server() {
    static test::PostgresServer server;  // stopped and removed when the program exits
    return server;
  }
  static std::string DatabaseUrl(const std::string& database) {
    return "postgresql://" + Server().user() + "@127.0.0.1:" + std::to_string(Server().port()) + "/" + database;
  }

  std::unique_ptr<Store> Open() {
    if (postgres()) return std::make_unique<PostgresStore>(url_, PostgresStore::Options{});
    return std::make_unique<SqliteStore>(path_);
  }
  // What the store's messages name the database by.
  std::string Location() const { return postgres() ? "postgresql://anvil@127.0.0.1:" : path_; }
  std::string Raw(const std::string& sql) { return postgres() ? PostgresSql(url_, sql) : SqliteSql(path_, sql); }

  static JobRow Job(std::string name, JobState state = JobState::kQueued, std::string client_id = "") {
    JobRow r;
    r.name = std::move(name);
    r.client_job_id = std::move(client_id);
    r.spec_json = R"({"model":"mlp"})";
    r.state = state;
    r.device = "cpu";
    return r;
  }
  static std::vector<std::string> Names(const std::vector<JobRow>& rows) {
    std::vector<std::string> out;
    for (const JobRow& r : rows) out.push_back(r.name);
    return out;
  }
  MetricRow Event(const std::string& job_id, int64_t step, std::string kind = "step") {
    return MetricRow{job_id, 0, step, std::move(kind), "{\"loss\":" + std::to_string(step) + "}", 0};
  }

  std::string dir_, path_, database_, url_;
};

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/anvil_store_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(StoreTest, CreatesSchemaAndDataSurvivesReopening) {
  std::string id;
  {
    const std::unique_ptr<Store> owned = Open();
    Store& store = *owned;
    JobRow row = Job("first");
    row.priority = 7;
    id = store.insert_job(row).first.id;
    store.append_metric(Event(id, 1));
    store.register_model({"mnist", 0, id, "models/mnist/1", "{}", 0});
  }
  EXPECT_EQ(Raw("SELECT version FROM schema_version"), std::to_string(Store::kSchemaVersion));
  if (GetParam() == "sqlite") {
    ASSERT_TRUE(std::filesystem::exists(path_));
    EXPECT_EQ(Raw("PRAGMA journal_mode"), "wal");  // WAL is persistent in the file
  }
  EXPECT_EQ(Raw("SELECT state FROM jobs WHERE name = 'first'"), "QUEUED");

  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::optional<JobRow> job = store.get_job(id);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->name, "first");
  EXPECT_EQ(job->priority, 7);
  EXPECT_EQ(job->spec_json, R"({"model":"mlp"})");
  ASSERT_EQ(store.metrics(id, 0).size(), 1u);
  EXPECT_EQ(store.metrics(id, 0)[0].payload_json, "{\"loss\":1}");
  ASSERT_TRUE(store.get_model("mnist", 0).has_value());
  EXPECT_EQ(store.get_model("mnist", 0)->job_id, id);
  // The seq counter continues after reopening instead of restarting.
  EXPECT_EQ(store.append_metric(Event(id, 2)), 2);
  EXPECT_EQ(store.insert_job(Job("second")).first.seq, job->seq + 1);
}

TEST_P(StoreTest, InsertIsIdempotentPerClientJobId) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const auto [first, inserted] = store.insert_job(Job("a", JobState::kQueued, "client-1"));
  EXPECT_TRUE(inserted);
  EXPECT_GT(first.seq, 0);
  EXPECT_GT(first.created_ms, 1600000000000);  // a real unix time in ms (after 2020)

  JobRow retry = Job("a-retried", JobState::kQueued, "client-1");
  retry.spec_json = R"({"model":"cnn"})";
  const auto [again, inserted_again] = store.insert_job(retry);
  EXPECT_FALSE(inserted_again);
  EXPECT_EQ(again.id, first.id);
  EXPECT_EQ(again.name, "a");
  EXPECT_EQ(again.spec_json, R"({"model":"mlp"})");
  EXPECT_EQ(again.seq, first.seq);

  const auto [other, inserted_other] = store.insert_job(Job("b", JobState::kQueued, "client-2"));
  EXPECT_TRUE(inserted_other);
  EXPECT_NE(other.id, first.id);
  // Jobs without a client id never collide with each other.
  EXPECT_TRUE(store.insert_job(Job("c")).second);
  EXPECT_TRUE(store.insert_job(Job("d")).second);
  EXPECT_EQ(store.list_jobs().size(), 4u);
  EXPECT_EQ(Raw("SELECT count(*) FROM jobs WHERE client_job_id = 'client-1'"), "1");
}

TEST_P(StoreTest, GeneratedIdsAreWellFormedAndUnique) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::regex pattern("job-[0-9a-f]{12}");
  std::set<std::string> ids;
  int64_t last_seq = 0;
  for (int i = 0; i < 1000; ++i) {
    const JobRow row = store.insert_job(Job("j" + std::to_string(i))).first;
    EXPECT_TRUE(std::regex_match(row.id, pattern)) << row.id;
    EXPECT_GT(row.seq, last_seq);
    last_seq = row.seq;
    ids.insert(row.id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

TEST_P(StoreTest, ExplicitIdThatExistsIsRefused) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  JobRow row = Job("x");
  row.id = "job-000000000001";
  EXPECT_EQ(store.insert_job(row).first.id, "job-000000000001");
  EXPECT_THAT(ErrorOf([&] { store.insert_job(row); }), HasSubstr("'job-000000000001' which already exists"));
}

TEST_P(StoreTest, ListJobsFiltersByStateNewestFirst) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  store.insert_job(Job("q1", JobState::kQueued));
  store.insert_job(Job("r1", JobState::kRunning));
  store.insert_job(Job("f1", JobState::kFailed));
  store.insert_job(Job("q2", JobState::kQueued));
  store.insert_job(Job("r2", JobState::kRunning));
  store.insert_job(Job("s1", JobState::kSucceeded));

  using ::testing::ElementsAre;
  EXPECT_THAT(Names(store.list_jobs()), ElementsAre("s1", "r2", "q2", "f1", "r1", "q1"));
  EXPECT_THAT(Names(store.list_jobs({JobState::kRunning})), ElementsAre("r2", "r1"));
  EXPECT_THAT(Names(store.list_jobs({JobState::kFailed, JobState::kQueued, JobState::kFailed})),
              ElementsAre("q2", "f1", "q1"));
  EXPECT_THAT(Names(store.list_jobs({}, 2)), ElementsAre("s1", "r2"));
  EXPECT_THAT(Names(store.list_jobs({JobState::kQueued}, 1)), ElementsAre("q2"));
  EXPECT_THAT(Names(store.list_jobs({}, -5)), ::testing::SizeIs(6));
  EXPECT_TRUE(store.list_jobs({JobState::kCancelled}).empty());
}

TEST_P(StoreTest, JobsInStatesIsOldestFirst) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  store.insert_job(Job("r1", JobState::kRunning));
  store.insert_job(Job("q1", JobState::kQueued));
  store.insert_job(Job("i1", JobState::kInterrupted));
  store.insert_job(Job("s1", JobState::kSucceeded));
  store.insert_job(Job("r2", JobState::kRunning));

  using ::testing::ElementsAre;
  EXPECT_THAT(Names(store.jobs_in_states({JobState::kRunning, JobState::kInterrupted})), ElementsAre("r1", "i1", "r2"));
  EXPECT_THAT(Names(store.jobs_in_states({JobState::kQueued})), ElementsAre("q1"));
  EXPECT_TRUE(store.jobs_in_states({}).empty());
}

TEST_P(StoreTest, UpdateJobRoundTripsEveryMutableField) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const JobRow inserted = store.insert_job(Job("train", JobState::kQueued, "cid")).first;
  JobRow row = inserted;
  row.state = JobState::kCancelled;
  row.reason = "cancelled by user";
  row.priority = -3;
  row.device = "cuda:1";
  row.started_ms = 1700000000123;
  row.finished_ms = 1700000009999;
  row.step = 4242;
  row.epoch = 17;
  row.checkpoint = "checkpoints/train/step-4242";
  row.model_name = "digits";
  row.model_version = 5;
  // Fixed at submit: update_job must not change these.
  row.name = "renamed";
  row.spec_json = "{}";
  row.created_ms = 1;
  store.update_job(row);

  const JobRow got = *store.get_job(inserted.id);
  EXPECT_EQ(got.state, JobState::kCancelled);
  EXPECT_EQ(got.reason, "cancelled by user");
  EXPECT_EQ(got.priority, -3);
  EXPECT_EQ(got.device, "cuda:1");
  EXPECT_EQ(got.started_ms, 1700000000123);
  EXPECT_EQ(got.finished_ms, 1700000009999);
  EXPECT_EQ(got.step, 4242);
  EXPECT_EQ(got.epoch, 17);
  EXPECT_EQ(got.checkpoint, "checkpoints/train/step-4242");
  EXPECT_EQ(got.model_name, "digits");
  EXPECT_EQ(got.model_version, 5);
  EXPECT_EQ(got.name, "train");
  EXPECT_EQ(got.client_job_id, "cid");
  EXPECT_EQ(got.spec_json, R"({"model":"mlp"})");
  EXPECT_EQ(got.created_ms, inserted.created_ms);
  EXPECT_EQ(got.seq, inserted.seq);
  EXPECT_EQ(Raw("SELECT state FROM jobs"), "CANCELLED");

  JobRow unknown = row;
  unknown.id = "job-ffffffffffff";
  const std::string msg = ErrorOf([&] { store.update_job(unknown); });
  EXPECT_THAT(msg, HasSubstr("expected an existing job id, got 'job-ffffffffffff'"));
  EXPECT_THAT(msg, HasSubstr(Location()));
}

TEST(JobState, NamesRoundTripAndBadNamesAreRefused) {
  const std::pair<JobState, const char*> all[] = {
      {JobState::kQueued, "QUEUED"}, {JobState::kRunning, "RUNNING"},     {JobState::kSucceeded, "SUCCEEDED"},
      {JobState::kFailed, "FAILED"}, {JobState::kCancelled, "CANCELLED"}, {JobState::kInterrupted, "INTERRUPTED"},
  };
  for (const auto& [state, name] : all) {
    EXPECT_EQ(job_state_name(state), name);
    EXPECT_EQ(parse_job_state(name), state);
  }
  EXPECT_THAT(ErrorOf([] { parse_job_state("queued"); }), HasSubstr("unknown job state 'queued'"));
  EXPECT_THAT(ErrorOf([] { parse_job_state(""); }), HasSubstr("expected one of QUEUED, RUNNING"));
  EXPECT_THAT(ErrorOf([] { parse_job_state("DONE"); }), HasSubstr("'DONE'"));

  EXPECT_TRUE(is_terminal(JobState::kSucceeded));
  EXPECT_TRUE(is_terminal(JobState::kFailed));
  EXPECT_TRUE(is_terminal(JobState::kCancelled));
  EXPECT_FALSE(is_terminal(JobState::kQueued));
  EXPECT_FALSE(is_terminal(JobState::kRunning));
  EXPECT_FALSE(is_terminal(JobState::kInterrupted));
}

TEST_P(StoreTest, MetricSeqsCountFromOnePerJobAndFilter) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string a = store.insert_job(Job("a")).first.id;
  const std::string b = store.insert_job(Job("b")).first.id;
  for (int64_t step = 1; step <= 5; ++step) EXPECT_EQ(store.append_metric(Event(a, step)), step);
  EXPECT_EQ(store.append_metric(Event(b, 10)), 1);  // b's stream is numbered on its own
  EXPECT_EQ(store.append_metric(Event(a, 5, "epoch")), 6);

  const std::vector<MetricRow> all = store.metrics(a, 0);
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].seq, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(all[i].job_id, a);
    EXPECT_GT(all[i].time_ms, 1600000000000);
  }
  EXPECT_EQ(all[5].kind, "epoch");

  auto seqs = [](const std::vector<MetricRow>& rows) {
    std::vector<int64_t> out;
    for (const MetricRow& r : rows) out.push_back(r.seq);
    return out;
  };
  using ::testing::ElementsAre;
  EXPECT_THAT(seqs(store.metrics(a, 4)), ElementsAre(4, 5, 6));
  EXPECT_THAT(seqs(store.metrics(a, 0, 3)), ElementsAre(4, 5, 6));
  EXPECT_THAT(seqs(store.metrics(a, 5, 5)), ElementsAre(6));
  EXPECT_THAT(seqs(store.metrics(a, 0, 0, 2)), ElementsAre(1, 2));
  EXPECT_THAT(seqs(store.metrics(a, 2, 0, 2)), ElementsAre(2, 3));
  EXPECT_TRUE(store.metrics(a, 6).empty());
  EXPECT_TRUE(store.metrics("job-unknown", 0).empty());
  EXPECT_THAT(seqs(store.metrics(b, 0)), ElementsAre(1));

  EXPECT_THAT(ErrorOf([&] { store.append_metric(Event("job-nosuchjob0", 1)); }),
              HasSubstr("expected an existing job id, got 'job-nosuchjob0'"));
}

TEST_P(StoreTest, TruncateThenReplayKeepsEachStepOnce) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string id = store.insert_job(Job("resumed")).first.id;
  store.append_metric(Event(id, 0, "state"));
  for (int64_t step = 1; step <= 10; ++step) store.append_metric(Event(id, step));
  store.append_metric(Event(id, 10, "epoch"));
  store.append_metric(Event(id, 10, "state"));  // e.g. the job was interrupted at step 10

  // Resumed from a checkpoint at step 6: steps 7..10 will be replayed.
  store.truncate_metrics_after(id, 6);
  int64_t last_seq = 0;
  for (const MetricRow& r : store.metrics(id, 0)) last_seq = std::max(last_seq, r.seq);
  for (int64_t step = 7; step <= 12; ++step) {
    const int64_t seq = store.append_metric(Event(id, step));
    EXPECT_GT(seq, last_seq) << "a seq was handed out twice";
    last_seq = seq;
  }

  std::vector<int64_t> steps;
  int states = 0;
  int64_t prev_seq = 0;
  for (const MetricRow& r : store.metrics(id, 0)) {
    EXPECT_GT(r.seq, prev_seq);
    prev_seq = r.seq;
    if (r.kind == "step") steps.push_back(r.step);
    if (r.kind == "state") ++states;
    EXPECT_NE(r.kind, "epoch");  // the epoch event at step 10 was after the checkpoint
  }
  std::vector<int64_t> want(12);
  for (int64_t i = 0; i < 12; ++i) want[i] = i + 1;
  EXPECT_EQ(steps, want);
  EXPECT_EQ(states, 2);  // state changes are history and survive truncation
}

TEST_P(StoreTest, ModelVersionsCountPerName) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string job = store.insert_job(Job("j")).first.id;
  EXPECT_EQ(store.register_model({"mnist", 0, job, "models/mnist/a", "{}", 0}).version, 1);
  EXPECT_EQ(store.register_model({"digits", 0, job, "models/digits/a", "{}", 0}).version, 1);
  EXPECT_EQ(store.register_model({"mnist", 99, job, "models/mnist/b", "{}", 0}).version, 2);  // 99 is ignored
  const ModelRow third = store.register_model({"mnist", 0, job, "models/mnist/c", R"({"in":"f32"})", 0});
  EXPECT_EQ(third.version, 3);
  EXPECT_GT(third.created_ms, 1600000000000);
  EXPECT_EQ(store.register_model({"digits", 0, job, "models/digits/b", "{}", 0}).version, 2);

  const std::optional<ModelRow> latest = store.get_model("mnist", 0);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->version, 3);
  EXPECT_EQ(latest->path, "models/mnist/c");
  EXPECT_EQ(latest->signature_json, R"({"in":"f32"})");
  EXPECT_EQ(store.get_model("mnist", 2)->path, "models/mnist/b");
  EXPECT_EQ(store.get_model("digits", -1)->version, 2);
  EXPECT_FALSE(store.get_model("mnist", 4).has_value());
  EXPECT_FALSE(store.get_model("unknown", 0).has_value());
  EXPECT_FALSE(store.get_model("unknown", 1).has_value());

  std::vector<std::string> listed;
  for (const ModelRow& m : store.list_models()) listed.push_back(m.name + ":" + std::to_string(m.version));
  EXPECT_THAT(listed, ::testing::ElementsAre("digits:1", "digits:2", "mnist:1", "mnist:2", "mnist:3"));
  EXPECT_EQ(store.list_models("digits").size(), 2u);
  EXPECT_TRUE(store.list_models("unknown").empty());
  EXPECT_THAT(ErrorOf([&] { store.register_model({"", 0, job, "p", "{}", 0}); }), HasSubstr("model name"));
  // Newest first, whatever the names: what the status page lists. An explicit time orders the
  // rows registered in the same millisecond above.
  store.register_model({"aardvark", 0, job, "models/a/a", "{}", 4102444800000});  // the newest
  std::vector<std::string> recent;
  for (const ModelRow& m : store.recent_models(3)) recent.push_back(m.name + ":" + std::to_string(m.version));
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0], "aardvark:1");
  EXPECT_EQ(store.recent_models(0).size(), 6u);
}

TEST_P(StoreTest, LooksUpByClientIdAndCountsByState) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  store.insert_job(Job("a", JobState::kQueued, "retry-me"));
  store.insert_job(Job("b", JobState::kQueued));
  store.insert_job(Job("c", JobState::kRunning));
  store.insert_job(Job("d", JobState::kFailed, "other"));
  const std::optional<JobRow> found = store.get_job_by_client_id("retry-me");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->name, "a");
  EXPECT_FALSE(store.get_job_by_client_id("nobody").has_value());
  EXPECT_FALSE(store.get_job_by_client_id("").has_value());  // jobs without an id are not found by ""
  // The aggregate agrees with counting the listed rows; states without jobs are absent.
  std::map<JobState, int64_t> listed;
  for (const JobRow& r : store.list_jobs()) ++listed[r.state];
  EXPECT_EQ(store.count_jobs_by_state(), listed);
  EXPECT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[JobState::kQueued], 2);
}

TEST_P(StoreTest, ConcurrentAppendsGetUniqueConsecutiveSeqs) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string id = store.insert_job(Job("busy")).first.id;
  constexpr int kThreads = 4, kPerThread = 200;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) got[t].push_back(store.append_metric(Event(id, t * kPerThread + i)));
    });
  }
  for (std::thread& th : threads) th.join();

  std::set<int64_t> seqs;
  for (const auto& v : got) {
    for (size_t i = 1; i < v.size(); ++i) EXPECT_GT(v[i], v[i - 1]);  // each thread sees its own appends in order
    seqs.insert(v.begin(), v.end());
  }
  constexpr int64_t n = kThreads * kPerThread;
  ASSERT_EQ(seqs.size(), static_cast<size_t>(n));
  EXPECT_EQ(*seqs.begin(), 1);
  EXPECT_EQ(*seqs.rbegin(), n);
  EXPECT_EQ(store.metrics(id, 0).size(), static_cast<size_t>(n));
  EXPECT_EQ(Raw("SELECT count(DISTINCT seq) FROM metrics"), std::to_string(n));
}

TEST_P(StoreTest, NewerSchemaIsRefused) {
  { Open(); }
  Raw("UPDATE schema_version SET version = 999");
  const std::string msg = ErrorOf([&] { Open(); });
  EXPECT_THAT(msg, HasSubstr("schema version 999"));
  EXPECT_THAT(msg, HasSubstr("newer than version " + std::to_string(Store::kSchemaVersion)));
  EXPECT_THAT(msg, HasSubstr(Location()));
}

TEST_P(StoreTest, OlderSchemasAreMigratedKeepingTheirJobs) {
  for (int64_t from = 1; from < Store::kSchemaVersion; ++from) {
    SCOPED_TRACE("from version " + std::to_string(from));
    std::string id;
    {
      const std::unique_ptr<Store> owned = Open();
      id = owned->insert_job(Job("old")).first.id;
    }
    // Back to what that version wrote: version 1 had no crashes column, version 2 no crash_step,
    // version 3 no leases, version 4 no rendezvous table, version 5 no job_parts table.
    Raw("DROP TABLE job_parts");
    if (from <= 4) Raw("DROP TABLE rendezvous");
    if (from <= 3) {
      Raw("DROP TABLE claims");
      for (const char* column : {"owner", "lease_epoch", "lease_expires_ms", "cancel_requested"}) {
        Raw(std::string("ALTER TABLE jobs DROP COLUMN ") + column);
      }
    }
    if (from <= 2) Raw("ALTER TABLE jobs DROP COLUMN crash_step");
    if (from == 1) Raw("ALTER TABLE jobs DROP COLUMN crashes");
    Raw("UPDATE schema_version SET version = " + std::to_string(from));
    const std::unique_ptr<Store> owned = Open();
    Store& store = *owned;
    EXPECT_EQ(Raw("SELECT version FROM schema_version"), std::to_string(Store::kSchemaVersion));
    EXPECT_EQ(Raw("SELECT count(*) FROM schema_version"), "1");
    std::optional<JobRow> row = store.get_job(id);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->name, "old");
    EXPECT_EQ(row->crashes, 0);
    EXPECT_EQ(row->crash_step, -1);
    EXPECT_EQ(row->owner, "");
    EXPECT_EQ(row->lease_epoch, 0);
    row->crashes = 3;
    row->crash_step = 75;
    store.update_job(*row);
    EXPECT_EQ(store.get_job(id)->crashes, 3);
    EXPECT_EQ(store.get_job(id)->crash_step, 75);
    ASSERT_TRUE(store.delete_job(id));
  }
}

TEST_P(StoreTest, ForeignDatabaseIsRefused) {
  Raw("CREATE TABLE other (x INTEGER)");
  EXPECT_THAT(ErrorOf([&] { Open(); }), HasSubstr("no schema_version table"));
}

TEST_F(SqliteStoreTest, UnopenablePathIsRefused) {
  const std::string missing_dir = dir_ + "/no/such/dir/anvil.db";
  const std::string msg = ErrorOf([&] { SqliteStore store(missing_dir); });
  EXPECT_THAT(msg, HasSubstr("opening the database"));
  EXPECT_THAT(msg, HasSubstr(missing_dir));
}

// Replicas share the database: every operation that hands out something unique must stay
// unique across connections, not only across threads of one.
TEST_P(StoreTest, ConnectionsRacingForTheSameNamesGetDistinctResults) {
  { Open(); }  // the schema, before the race
  const std::string job = Open()->insert_job(Job("j")).first.id;
  constexpr int kConnections = 4, kEach = 25;
  std::vector<std::vector<int64_t>> versions(kConnections);
  std::vector<std::string> ids(kConnections);
  std::vector<int> inserted(kConnections, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      const std::unique_ptr<Store> own = Open();
      const auto [row, fresh] =
          own->insert_job(Job("submitted-" + std::to_string(t), JobState::kQueued, "same-client"));
      ids[t] = row.id;
      inserted[t] = fresh ? 1 : 0;
      for (int i = 0; i < kEach; ++i) versions[t].push_back(own->register_model({"m", 0, job, "p", "{}", 0}).version);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(std::accumulate(inserted.begin(), inserted.end(), 0), 1);
  for (const std::string& id : ids) EXPECT_EQ(id, ids[0]);
  std::set<int64_t> all;
  for (const auto& v : versions) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kConnections * kEach));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kConnections * kEach);
}

bool AnyDevice(const JobRow&) { return true; }

TEST_P(StoreTest, AClaimTakesTheFirstFittingJobUnderALeaseAndIsRecorded) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  JobRow gpu = Job("gpu");
  gpu.device = "cuda:0";
  gpu.priority = 9;
  store.insert_job(gpu);
  const JobRow low = store.insert_job(Job("low")).first;
  JobRow high = Job("high");
  high.priority = 5;
  high = store.insert_job(high).first;
  store.insert_job(Job("done", JobState::kSucceeded));
  const auto cpu_only = [](const JobRow& r) { return r.device != "cuda:0"; };

  const int64_t before = unix_millis();
  const std::optional<JobRow> first = store.claim_job("replica-a", 30000, cpu_only);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->id, high.id);  // priority first; the GPU job does not fit
  EXPECT_EQ(first->state, JobState::kRunning);
  EXPECT_EQ(first->owner, "replica-a");
  EXPECT_EQ(first->lease_epoch, 1);
  EXPECT_GE(first->lease_expires_ms, before + 30000 - 1000);  // the database's clock, near this one
  EXPECT_LE(first->lease_expires_ms, unix_millis() + 30000 + 1000);
  EXPECT_EQ(store.claim_job("replica-b", 30000, cpu_only)->id, low.id);
  EXPECT_FALSE(store.claim_job("replica-b", 30000, cpu_only).has_value());
  const std::vector<ClaimRow> history = store.claims();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].job_id, high.id);
  EXPECT_EQ(history[0].owner, "replica-a");
  EXPECT_EQ(history[0].epoch, 1);
  EXPECT_EQ(history[1].owner, "replica-b");
  EXPECT_EQ(store.claims(low.id).size(), 1u);
  // update_job does not touch the lease.
  JobRow edited = *store.get_job(high.id);
  edited.owner = "someone-else";
  edited.lease_epoch = 77;
  store.update_job(edited);
  EXPECT_EQ(store.get_job(high.id)->owner, "replica-a");
  EXPECT_EQ(store.get_job(high.id)->lease_epoch, 1);
}

TEST_P(StoreTest, AClaimSeesTheDeviceTheSpecRequestsNotTheOneTheJobRanOn) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  JobRow row = Job("ran-before");
  row.spec_json = R"({"name":"ran-before","device":"any","model_json":")" + std::string(4096, ' ') + R"("})";
  row.device = "any";
  row = store.insert_job(row).first;
  row.device = "cuda:1";  // placed there on its first run, then drained
  row.state = JobState::kInterrupted;
  store.update_job(row);
  std::vector<JobRow> seen;
  const std::optional<JobRow> claimed = store.claim_job("r", 30000, [&](const JobRow& r) {
    seen.push_back(r);
    return r.device == "any";
  });
  ASSERT_TRUE(claimed.has_value());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].id, row.id);
  EXPECT_EQ(seen[0].seq, row.seq);
  EXPECT_TRUE(seen[0].spec_json.empty());        // the scan reads no spec
  EXPECT_EQ(claimed->spec_json, row.spec_json);  // the claimed row is whole
}

TEST_P(StoreTest, ReplicasClaimingAtOnceNeverShareAJob) {
  { Open(); }
  constexpr int kJobs = 40, kReplicas = 4;
  {
    const std::unique_ptr<Store> owned = Open();
    for (int i = 0; i < kJobs; ++i) owned->insert_job(Job("j" + std::to_string(i)));
  }
  std::vector<std::vector<std::string>> got(kReplicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    threads.emplace_back([&, r] {
      const std::unique_ptr<Store> own = Open();
      while (std::optional<JobRow> job = own->claim_job("replica-" + std::to_string(r), 30000, AnyDevice)) {
        got[r].push_back(job->id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<std::string> all;
  size_t total = 0;
  for (const auto& ids : got) {
    all.insert(ids.begin(), ids.end());
    total += ids.size();
  }
  EXPECT_EQ(total, static_cast<size_t>(kJobs));
  EXPECT_EQ(all.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(Open()->claims().size(), static_cast<size_t>(kJobs));
}

TEST_P(StoreTest, RenewalReportsLostLeasesAndCancelRequests) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string a = store.insert_job(Job("a")).first.id;
  const std::string b = store.insert_job(Job("b")).first.id;
  const JobRow ja = *store.claim_job("me", 1000, AnyDevice);
  const JobRow jb = *store.claim_job("me", 1000, AnyDevice);
  LeaseRenewal r = store.renew_leases("me", {{a, ja.lease_epoch}, {b, jb.lease_epoch}}, 60000);
  EXPECT_TRUE(r.lost.empty());
  EXPECT_TRUE(r.cancel_requested.empty());
  EXPECT_GT(store.get_job(a)->lease_expires_ms, ja.lease_expires_ms + 30000);
  // Another replica's renewal of the same lease, or one at a stale epoch, renews nothing.
  EXPECT_EQ(store.renew_leases("other", {{a, ja.lease_epoch}}, 60000).lost, std::vector<std::string>{a});
  EXPECT_EQ(store.renew_leases("me", {{a, ja.lease_epoch + 1}}, 60000).lost, std::vector<std::string>{a});

  EXPECT_TRUE(store.request_cancel(b));
  r = store.renew_leases("me", {{a, ja.lease_epoch}, {b, jb.lease_epoch}}, 60000);
  EXPECT_EQ(r.cancel_requested, std::vector<std::string>{b});
  EXPECT_TRUE(r.lost.empty());
  // A takeover: the epoch moves on, and the old holder's lease is lost.
  JobRow taken = *store.get_job(a);
  taken.state = JobState::kQueued;
  taken.owner = "";
  taken.lease_epoch = ja.lease_epoch + 1;
  ASSERT_TRUE(store.update_job_fenced(taken, ja.lease_epoch));
  r = store.renew_leases("me", {{a, ja.lease_epoch}, {b, jb.lease_epoch}}, 60000);
  EXPECT_EQ(r.lost, std::vector<std::string>{a});
  // A finished job cannot be asked to cancel.
  JobRow done = *store.get_job(b);
  done.state = JobState::kCancelled;
  ASSERT_TRUE(store.update_job_fenced(done, jb.lease_epoch));
  EXPECT_FALSE(store.request_cancel(b));
  EXPECT_FALSE(store.request_cancel("job-nosuchjob0"));
}

TEST_P(StoreTest, ALapsedLeaseIsFoundAndTheOldHoldersWritesAreFenced) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string id = store.insert_job(Job("partitioned")).first.id;
  const JobRow held = *store.claim_job("replica-a", 1, AnyDevice);  // lapses at once
  EXPECT_EQ(store.append_metric(Event(id, 1), held.lease_epoch), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(store.lapsed_leases(60000).empty());  // within the grace
  const std::vector<JobRow> lapsed = store.lapsed_leases(0);
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].id, id);
  // Replica B requeues it (fenced on the epoch it read) and claims it.
  JobRow requeued = lapsed[0];
  requeued.state = JobState::kQueued;
  requeued.owner = "";
  requeued.lease_epoch = held.lease_epoch + 1;
  ASSERT_TRUE(store.update_job_fenced(requeued, held.lease_epoch));
  EXPECT_FALSE(store.update_job_fenced(requeued, held.lease_epoch));  // a second sweeper loses
  const JobRow again = *store.claim_job("replica-b", 30000, AnyDevice);
  EXPECT_EQ(again.lease_epoch, held.lease_epoch + 2);
  // Replica A comes back and writes late: refused, and nothing changed.
  JobRow late = held;
  late.state = JobState::kSucceeded;
  EXPECT_FALSE(store.update_job_fenced(late, held.lease_epoch));
  try {
    store.append_metric(Event(id, 2), held.lease_epoch);
    ADD_FAILURE() << "a fenced append was written";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::kFenced);
    EXPECT_THAT(e.what(), HasSubstr("another replica has taken the job over"));
  }
  EXPECT_EQ(store.get_job(id)->state, JobState::kRunning);
  EXPECT_EQ(store.get_job(id)->owner, "replica-b");
  EXPECT_EQ(store.metrics(id, 0).size(), 1u);
  EXPECT_EQ(store.append_metric(Event(id, 2), again.lease_epoch), 2);
  const std::vector<ClaimRow> history = store.claims(id);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].owner, "replica-b");
  EXPECT_EQ(history[1].epoch, again.lease_epoch);
}

TEST_P(StoreTest, PartsOfASpreadJobAreClaimedByOtherReplicasAndEndWithItsAttempt) {
  const std::unique_ptr<Store> owned = Open();
  Store& store = *owned;
  const std::string id = store.insert_job(Job("spread")).first.id;
  const JobRow held = *store.claim_job("r0", 30000, AnyDevice);
  if (GetParam() == "sqlite") {
    // One replica runs every rank itself: spreading a job is refused, saying why.
    try {
      store.open_parts(id, held.lease_epoch, 0, 3, 2, "");
      ADD_FAILURE() << "the embedded store opened parts";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("need the PostgreSQL store"));
    }
    EXPECT_NO_THROW(store.remove_parts(id));
    return;
  }
  // Only under the job's current lease.
  EXPECT_FALSE(store.open_parts(id, held.lease_epoch + 1, 0, 3, 2, ""));
  ASSERT_TRUE(store.open_parts(id, held.lease_epoch, 0, 3, 2, "jobs/x/checkpoints/e1-s0-t0.safetensors"));
  std::vector<JobPart> parts = store.parts(id, 0);
  ASSERT_EQ(parts.size(), 2u);  // nodes 1 and 2; node 0 is the holder's
  EXPECT_EQ(parts[0].node, 1);
  EXPECT_EQ(parts[1].node, 2);
  EXPECT_EQ(parts[0].state, "open");
  EXPECT_EQ(parts[0].nnodes, 3);
  EXPECT_EQ(parts[0].nproc, 2);
  // Not by the holder itself, not by a replica with too few rank slots.
  EXPECT_FALSE(store.claim_part("r0", 30000, 8).has_value());
  EXPECT_FALSE(store.claim_part("r1", 30000, 1).has_value());
  const std::optional<JobPart> a = store.claim_part("r1", 30000, 2);
  const std::optional<JobPart> b = store.claim_part("r2", 1, 2);  // lapses at once
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->node, 1);
  EXPECT_EQ(b->node, 2);
  EXPECT_EQ(a->checkpoint, "jobs/x/checkpoints/e1-s0-t0.safetensors");
  EXPECT_EQ(a->epoch, held.lease_epoch);
  EXPECT_FALSE(store.claim_part("r3", 30000, 2).has_value());  // none left
  EXPECT_TRUE(store.renew_parts("r1", {*a}, 30000).empty());
  EXPECT_EQ(store.renew_parts("r3", {*a}, 30000).size(), 1u);  // not its part
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  parts = store.parts(id, 0);
  EXPECT_FALSE(parts[0].lapsed);
  EXPECT_TRUE(parts[1].lapsed);
  EXPECT_EQ(parts[1].owner, "r2");
  store.finish_part("r1", *a, false, "rank 2 exited with code 75");
  parts = store.parts(id, 60000);
  EXPECT_EQ(parts[0].state, "failed");
  EXPECT_EQ(parts[0].reason, "rank 2 exited with code 75");
  EXPECT_FALSE(parts[1].lapsed);  // within the grace
  // The next attempt replaces the parts: the old attempt's holders lose them.
  ASSERT_TRUE(store.open_parts(id, held.lease_epoch, 1, 3, 2, ""));
  EXPECT_EQ(store.renew_parts("r2", {*b}, 30000).size(), 1u);
  const std::optional<JobPart> c = store.claim_part("r3", 30000, 2);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->attempt, 1);
  EXPECT_TRUE(store.renew_parts("r3", {*c}, 30000).empty());
  // A takeover of the job ends its parts: they are neither renewed nor claimable.
  JobRow requeued = *store.get_job(id);
  requeued.state = JobState::kQueued;
  requeued.owner = "";
  requeued.lease_epoch = held.lease_epoch + 1;
  ASSERT_TRUE(store.update_job_fenced(requeued, held.lease_epoch));
  EXPECT_EQ(store.renew_parts("r3", {*c}, 30000).size(), 1u);
  EXPECT_FALSE(store.claim_part("r4", 30000, 2).has_value());
  store.remove_parts(id);
  EXPECT_TRUE(store.parts(id, 0).empty());
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// PostgreSQL only: replicas migrating together, a lost connection, text with a NUL, passwords.
class PostgresStoreTest : public StoreTest {};

TEST_F(PostgresStoreTest, ReplicasStartingTogetherMigrateOnce) {
  constexpr int kReplicas = 6;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kReplicas);
  for (int i = 0; i < kReplicas; ++i) {
    threads.emplace_back([&, i] {
      try {
        PostgresStore store(url_, {});
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(Raw("SELECT count(*) FROM schema_version"), "1");
  EXPECT_EQ(Raw("SELECT version FROM schema_version"), std::to_string(Store::kSchemaVersion));
}

TEST_F(PostgresStoreTest, ARestartedDatabaseFailsOneCallAsUnavailableThenReconnects) {
  PostgresStore store(url_, {});
  const std::string id = store.insert_job(Job("before")).first.id;
  Server().restart();
  // The call that finds the connection gone fails as UNAVAILABLE (kIo) and is not repeated:
  // its outcome could be unknown. The next call reconnects.
  try {
    store.get_job(id);
    ADD_FAILURE() << "a read on a connection the server closed succeeded";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::kIo) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("unreachable"));
  }
  EXPECT_EQ(store.get_job(id)->name, "before");
  EXPECT_TRUE(store.insert_job(Job("after")).second);
  // While the server is down, every call fails the same way, and none hangs.
  Server().stop();
  for (int i = 0; i < 2; ++i) {
    try {
      store.list_jobs();
      ADD_FAILURE() << "a call with the server down succeeded";
    } catch (const StoreError& e) {
      EXPECT_EQ(e.kind(), StoreError::Kind::kIo) << e.what();
    }
  }
  Server().restart();
  EXPECT_EQ(store.list_jobs().size(), 2u);
}

TEST_F(PostgresStoreTest, AWatchHearsSubmitsRequeuesCancelsAndItsOwnReconnects) {
  PostgresStore store(url_, {});
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> heard;
  auto watch = store.watch([&](std::string_view what) {
    std::lock_guard<std::mutex> lock(mu);
    heard.emplace_back(what);
    cv.notify_all();
  });
  ASSERT_NE(watch, nullptr);
  // Waits for `what` to be heard (after the ones already counted).
  size_t seen = 0;
  auto hears = [&](const std::string& what) {
    std::unique_lock<std::mutex> lock(mu);
    const bool got = cv.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::find(heard.begin() + static_cast<std::ptrdiff_t>(seen), heard.end(), what) != heard.end();
    });
    seen = heard.size();
    return got;
  };
  EXPECT_TRUE(hears("reconnected"));  // the first connection: look once
  PostgresStore other(url_, {});      // another replica's writes
  const std::string id = other.insert_job(Job("a")).first.id;
  EXPECT_TRUE(hears("queued"));
  const JobRow claimed = *other.claim_job("r2", 30000, AnyDevice);
  EXPECT_TRUE(other.request_cancel(id));
  EXPECT_TRUE(hears("cancel"));
  JobRow requeued = claimed;
  requeued.state = JobState::kQueued;
  requeued.lease_epoch = claimed.lease_epoch + 1;
  ASSERT_TRUE(other.update_job_fenced(requeued, claimed.lease_epoch));
  EXPECT_TRUE(hears("queued"));
  Server().restart();  // notices sent while it reconnects are lost: it says so
  EXPECT_TRUE(hears("reconnected"));
}

// TLS to the database, as the URL asks (libpq's sslmode): a server with a certificate from a
// development CA (scripts/dev-ca.sh), reached with verify-full, and refused with another CA.
class PostgresTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/anvil_pg_tls_" + std::to_string(::getpid()));
    std::filesystem::remove_all(*dir_);
    for (const char* ca : {"ca", "other-ca"}) {
      const std::string cmd =
          "bash " + test::SourceDir() + "/scripts/dev-ca.sh " + *dir_ + "/" + ca + " > /dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    test::PostgresServer::Options o;
    o.tls_cert = *dir_ + "/ca/server.pem";
    o.tls_key = *dir_ + "/ca/server.key";
    server_ = new test::PostgresServer(o);
  }
  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Url(const std::string& query) { return server_->url() + "?" + query; }

  static std::string* dir_;
  static test::PostgresServer* server_;
};
std::string* PostgresTlsTest::dir_ = nullptr;
test::PostgresServer* PostgresTlsTest::server_ = nullptr;

TEST_F(PostgresTlsTest, VerifyFullWithTheServersCaConnectsOverTls) {
  const std::string url = Url("sslmode=verify-full&sslrootcert=" + *dir_ + "/ca/ca.pem");
  PostgresStore store(url, {});
  JobRow row;
  row.name = "over-tls";
  row.spec_json = "{}";
  row.device = "cpu";
  EXPECT_TRUE(store.insert_job(row).second);
  EXPECT_EQ(PostgresSql(url, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), "t");
  // The messages name the database, not the query string's paths or anything secret.
  EXPECT_THAT(store.path(), ::testing::StartsWith("postgresql://anvil@127.0.0.1:"));
}

TEST_F(PostgresTlsTest, AnotherCaIsRefusedAsUnavailableNamingTheCertificate) {
  try {
    PostgresStore store(Url("sslmode=verify-full&sslrootcert=" + *dir_ + "/other-ca/ca.pem&connect_timeout=5"), {});
    ADD_FAILURE() << "connected to a server whose certificate another CA signed";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::kIo);
    EXPECT_THAT(e.what(), HasSubstr("certificate verify failed"));
  }
}

TEST_F(SqliteStoreTest, SqliteHasNoWatch) {
  SqliteStore store(dir_ + "/anvil.db");
  EXPECT_EQ(store.watch([](std::string_view) {}), nullptr);
}

TEST_F(PostgresStoreTest, TextWithANulByteIsRefusedNotCut) {
  PostgresStore store(url_, {});
  JobRow row = Job(std::string("a\0b", 3));
  EXPECT_THROW(store.insert_job(row), StoreError);
  EXPECT_TRUE(store.list_jobs().empty());
}

TEST_F(PostgresStoreTest, MessagesNeverCarryThePassword) {
  const std::string url = "postgresql://anvil:s3cret-pw@127.0.0.1:1/nodb?connect_timeout=2";
  const std::string msg = ErrorOf([&] { PostgresStore store(url, {}); });
  EXPECT_THAT(msg, HasSubstr("cannot connect to the PostgreSQL database postgresql://anvil@127.0.0.1:1/nodb"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("s3cret-pw")));
}

}  // namespace
}  // namespace anvil::server
