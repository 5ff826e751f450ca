// /status.json, the status page's data: the loss series of each job read from the store,
// long series thinned to a bounded number of points that keep the first and the last.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "server/status_page.h"
#include "server/store_sqlite.h"

namespace anvil::server {
namespace {

class StatusJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/anvil_status_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    store_ = std::make_unique<SqliteStore>(dir_ + "/anvil.db");
    JobRow r;
    r.name = "curve";
    r.spec_json = "{}";
    r.state = JobState::kRunning;
    r.device = "cpu";
    id_ = store_->insert_job(r).first.id;
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Steps(int64_t n) {
    for (int64_t s = 1; s <= n; ++s) {
      store_->append_metric({id_, 0, s, "step", R"({"step_metrics":{"loss":)" + std::to_string(1000.0 / s) + "}}", 0});
    }
  }
  nlohmann::json Train(size_t max_points) {
    const nlohmann::json j = nlohmann::json::parse(status_json(*store_, 20, max_points));
    return j["jobs"][0]["train_loss"];
  }

  std::string dir_, id_;
  std::unique_ptr<Store> store_;
};

TEST_F(StatusJsonTest, ShortSeriesAreSentWhole) {
  Steps(50);
  const nlohmann::json train = Train(100);
  ASSERT_EQ(train.size(), 50u);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(train[i][0].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_NEAR(train[i][1].get<double>(), 1000.0 / static_cast<double>(i + 1), 1e-3);
  }
}

TEST_F(StatusJsonTest, LongSeriesAreThinnedToEveryKthPointPlusTheLast) {
  Steps(1003);
  for (size_t max_points : {2u, 10u, 100u, 501u, 1002u}) {
    const nlohmann::json train = Train(max_points);
    EXPECT_LE(train.size(), max_points) << max_points;
    EXPECT_GE(train.size(), max_points / 2) << max_points;
    EXPECT_EQ(train.front()[0].get<int64_t>(), 1) << max_points;
    EXPECT_EQ(train.back()[0].get<int64_t>(), 1003) << max_points;
    // Evenly spaced: one stride between all points but the last pair.
    const int64_t stride = train[1][0].get<int64_t>() - train[0][0].get<int64_t>();
    for (size_t i = 1; i + 1 < train.size(); ++i) {
      EXPECT_EQ(train[i][0].get<int64_t>() - train[i - 1][0].get<int64_t>(), stride) << max_points;
    }
  }
}

// The page kept by the server reads only the events after the last request, and shows what
// a page built from the whole history shows.
TEST_F(StatusJsonTest, AKeptPageReadsOnlyNewEventsAndMatchesAFreshOne) {
  StatusPage page(*store_, 20, 64);
  int64_t step = 0;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 97 * (round + 1); ++i, ++step) {
      store_->append_metric({id_, 0, step + 1, "step", R"({"step_metrics":{"loss":)" + std::to_string(step) + "}}", 0});
    }
    const nlohmann::json kept = nlohmann::json::parse(page.json())["jobs"][0]["train_loss"];
    const nlohmann::json fresh = nlohmann::json::parse(status_json(*store_, 20, 64))["jobs"][0]["train_loss"];
    EXPECT_EQ(kept, fresh) << "round " << round;
    EXPECT_LE(kept.size(), 64u);
    EXPECT_EQ(kept.back()[0].get<int64_t>(), step);
  }
}

// A job resumed from a checkpoint replays steps: its stored steps after the checkpoint are
// replaced, and the kept series starts again instead of running backwards.
TEST_F(StatusJsonTest, AResumedJobsSeriesIsRebuilt) {
  StatusPage page(*store_, 20, 1000);
  Steps(100);
  (void)page.json();
  store_->truncate_metrics_after(id_, 50);
  for (int64_t s = 51; s <= 80; ++s) {
    store_->append_metric({id_, 0, s, "step", R"({"step_metrics":{"loss":)" + std::to_string(-s) + "}}", 0});
  }
  const nlohmann::json train = nlohmann::json::parse(page.json())["jobs"][0]["train_loss"];
  ASSERT_EQ(train.size(), 80u);
  for (size_t i = 0; i < train.size(); ++i) EXPECT_EQ(train[i][0].get<int64_t>(), static_cast<int64_t>(i + 1));
  EXPECT_EQ(train.back()[1].get<double>(), -80.0);
}

}  // namespace
}  // namespace anvil::server
