// Data-parallel ranks meeting through the PostgreSQL job store (workers/pg_rendezvous.h), the
// way ranks on several replicas do: three ranks join a Gloo group through ANVIL_RDZV_URL's
// store and all-reduce; the keys carry the job and the attempt; a rank that never comes is a
// timeout naming the key it waited for; a finished job's keys are removed and no other's.
#include <gloo/common/error.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <thread>

#include "core/anvil.h"
#include "core/distributed/environment.h"
#include "server/store_postgres.h"
#include "tests/fixtures/postgres_server.h"
#include "workers/pg_rendezvous.h"

namespace anvil::workers {
namespace {

using ::testing::HasSubstr;

std::string Sql(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  PGresult* r = PQexec(c, sql.c_str());
  std::string out = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(c);
  return out;
}

class PostgresRendezvousTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new test::PostgresServer(test::PostgresServer::Options{});
    // The job store's migrations make the rendezvous table (schema version 5).
    server::PostgresStore store(server_->url(), server::PostgresStore::Options{});
    register_postgres_rendezvous();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test::PostgresServer* server_;
};

test::PostgresServer* PostgresRendezvousTest::server_ = nullptr;

TEST_F(PostgresRendezvousTest, ThreeRanksMeetThroughTheJobStoreAndAllReduce) {
  constexpr int kWorld = 3;
  std::vector<double> sums(kWorld, 0);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      try {
        distributed::RankEnvironment env;
        env.rank = r;
        env.world_size = kWorld;
        env.local_rank = r;
        env.socket_ifname = "lo";
        env.rdzv_url = server_->url();
        env.job_id = "job-rdzv";
        env.timeout = env.rendezvous_timeout = std::chrono::seconds(60);
        std::shared_ptr<distributed::ProcessGroup> group = distributed::init_process_group(env);
        Tensor t = full({4}, static_cast<double>(r + 1), TensorOptions(kFloat32));
        group->all_reduce({t})->wait();
        sums[static_cast<size_t>(r)] = t.sum().item<double>();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(sums[static_cast<size_t>(r)], 4 * (1 + 2 + 3)) << "rank " << r;
  }
  // Every key the ranks wrote is the job's and its attempt's.
  EXPECT_NE(Sql(server_->url(), "SELECT count(*) FROM rendezvous WHERE key LIKE 'anvil/job-rdzv/attempt-0/%'"), "0");
  EXPECT_EQ(Sql(server_->url(), "SELECT count(*) FROM rendezvous WHERE key NOT LIKE 'anvil/job-rdzv/attempt-%'"), "0");
}

TEST_F(PostgresRendezvousTest, ARankThatNeverComesIsATimeoutNamingItsKey) {
  PostgresRendezvousStore store(server_->url(), std::chrono::milliseconds(300));
  store.set("anvil/job-t/attempt-0/rank-0", {'a'});
  EXPECT_EQ(store.get("anvil/job-t/attempt-0/rank-0"), std::vector<char>{'a'});
  const auto start = std::chrono::steady_clock::now();
  try {
    store.wait({"anvil/job-t/attempt-0/rank-0", "anvil/job-t/attempt-0/rank-1"});
    FAIL() << "waited for a key nobody sets";
  } catch (const gloo::IoException& e) {
    EXPECT_THAT(e.what(), HasSubstr("anvil/job-t/attempt-0/rank-1"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("rank-0,")));
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  // Binary values with NUL bytes come back whole; a second set replaces the value.
  const std::vector<char> binary = {'\0', '\x01', '\xff', '\0'};
  store.set("anvil/job-t/attempt-0/blob", binary);
  EXPECT_EQ(store.get("anvil/job-t/attempt-0/blob"), binary);
  store.set("anvil/job-t/attempt-0/blob", {'z'});
  EXPECT_EQ(store.get("anvil/job-t/attempt-0/blob"), std::vector<char>{'z'});
}

TEST_F(PostgresRendezvousTest, RemovingAJobsKeysLeavesOtherJobsAlone) {
  PostgresRendezvousStore store(server_->url(), std::chrono::seconds(5));
  store.set("anvil/job-a/attempt-0/x", {'1'});
  store.set("anvil/job-a/attempt-1/x", {'2'});
  store.set("anvil/job-ab/attempt-0/x", {'3'});
  store.set("anvil/job_a/attempt-0/x", {'4'});  // '_' is a LIKE wildcard: escaped
  store.remove_prefix("anvil/job-a/");
  EXPECT_EQ(Sql(server_->url(), "SELECT count(*) FROM rendezvous WHERE key LIKE 'anvil/job-a/%'"), "0");
  EXPECT_EQ(store.get("anvil/job-ab/attempt-0/x"), std::vector<char>{'3'});
  store.remove_prefix("anvil/job-_/");
  EXPECT_EQ(store.get("anvil/job_a/attempt-0/x"), std::vector<char>{'4'});
}

TEST_F(PostgresRendezvousTest, AnUnknownSchemeOrAnUnreachableDatabaseIsAClearError) {
  distributed::RankEnvironment env;
  env.rdzv_url = "etcd://somewhere/x";
  try {
    distributed::make_rendezvous_store(env);
    FAIL() << "an unknown scheme was accepted";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("no rendezvous store for the scheme \"etcd\""));
  }
  try {
    PostgresRendezvousStore store("postgresql://anvil:secret@127.0.0.1:1/anvil", std::chrono::seconds(1));
    FAIL() << "connected to nothing";
  } catch (const gloo::IoException& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot connect"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("secret")));  // the password is not echoed
  }
}

}  // namespace
}  // namespace anvil::workers
