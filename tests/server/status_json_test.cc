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

// Every chart's series from the events the trainer writes, the findings as GetFindings shows
// them (a code once at its highest severity, covering the steps from its first firing, most
// severe first), the job's spec, and the loss scale only for a job with loss scaling.
TEST_F(StatusJsonTest, EverySeriesFindingsAndTheSpec) {
  for (int64_t s = 1; s <= 4; ++s) {
    const std::string v = std::to_string(s);
    store_->append_metric({id_, 0, s, "step",
                           R"({"step_metrics":{"loss":)" + v + R"(,"grad_norm":)" + v + R"(.5,"lr":0.0)" + v +
                               R"(,"samples_per_second":)" + v + R"(00,"data_wait_ratio":0.)" + v +
                               (s == 3 ? "" : R"(,"loss_scale":)" + v + "024") + "}}",
                           0});
  }
  store_->append_metric(
      {id_, 0, 4, "epoch",
       R"({"epoch_metrics":{"has_val_loss":true,"val_loss":0.25,"has_val_accuracy":true,"val_accuracy":0.75}})", 0});
  const auto finding = [&](int64_t step, const std::string& code, const std::string& severity) {
    store_->append_metric({id_, 0, step, "finding",
                           R"({"finding":{"code":")" + code + R"(","severity":")" + severity + R"(","firstStep":")" +
                               std::to_string(step - 1) + R"(","lastStep":")" + std::to_string(step) +
                               R"(","evidence":[{"name":"x","value":)" + std::to_string(step) +
                               R"(}],"advice":"do <this>"}})",
                           0});
  };
  finding(2, "EXPLODING_GRADIENTS", "warning");
  finding(3, "DATA_STALL", "info");
  finding(4, "EXPLODING_GRADIENTS", "critical");
  const nlohmann::json job = nlohmann::json::parse(status_json(*store_))["jobs"][0];
  const auto series = [&](const char* name) {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& p : job[name]) out.emplace_back(p[0].get<int64_t>(), p[1].get<double>());
    return out;
  };
  using P = std::vector<std::pair<int64_t, double>>;
  EXPECT_EQ(series("train_loss"), (P{{1, 1}, {2, 2}, {3, 3}, {4, 4}}));
  EXPECT_EQ(series("grad_norm"), (P{{1, 1.5}, {2, 2.5}, {3, 3.5}, {4, 4.5}}));
  EXPECT_EQ(series("lr"), (P{{1, 0.01}, {2, 0.02}, {3, 0.03}, {4, 0.04}}));
  EXPECT_EQ(series("samples_per_second"), (P{{1, 100}, {2, 200}, {3, 300}, {4, 400}}));
  EXPECT_EQ(series("data_wait_ratio"), (P{{1, 0.1}, {2, 0.2}, {3, 0.3}, {4, 0.4}}));
  EXPECT_EQ(series("loss_scale"), (P{{1, 1024}, {2, 2024}, {4, 4024}}));  // step 3 had none
  EXPECT_EQ(series("val_loss"), (P{{4, 0.25}}));
  EXPECT_EQ(series("val_accuracy"), (P{{4, 0.75}}));
  const nlohmann::json& f = job["findings"];
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0]["code"], "EXPLODING_GRADIENTS");
  EXPECT_EQ(f[0]["severity"], "critical");
  EXPECT_EQ(f[0]["first_step"], 1);  // from its first firing
  EXPECT_EQ(f[0]["last_step"], 4);
  EXPECT_EQ(f[0]["evidence"]["x"], 4.0);
  EXPECT_EQ(f[0]["advice"], "do <this>");  // escaping is the page's, at the markup
  EXPECT_EQ(f[1]["code"], "DATA_STALL");
  EXPECT_TRUE(job["spec"].is_object());
  EXPECT_EQ(job["state"], "RUNNING");
}

// Served models: each name once with its newest versions first, each loaded version's
// precision, and the last minute's numbers from the serving statistics.
TEST_F(StatusJsonTest, ModelsWithVersionsPrecisionAndTheLastMinute) {
  for (int v = 1; v <= 3; ++v) {
    ModelRow r;
    r.name = "digits";
    r.job_id = id_;
    r.path = "models/digits-" + std::to_string(v) + ".anvil";
    r.created_ms = 1000 + v;
    store_->register_model(r);
  }
  metrics::ServingStats serving;
  serving.on_loaded("digits", 3, "int8");
  for (int i = 1; i <= 100; ++i) serving.on_request("digits", i * 1e-3, i % 25 != 0);
  serving.on_batch("digits", 6);
  serving.on_batch("digits", 2);
  StatusPage page(*store_, 20, 500, &serving);
  const nlohmann::json j = nlohmann::json::parse(page.json());
  ASSERT_EQ(j["models"].size(), 1u);
  const nlohmann::json& m = j["models"][0];
  EXPECT_EQ(m["name"], "digits");
  ASSERT_EQ(m["versions"].size(), 3u);
  EXPECT_EQ(m["versions"][0]["version"], 3);
  EXPECT_EQ(m["versions"][0]["precision"], "int8");
  EXPECT_EQ(m["versions"][1]["precision"], "");  // not loaded here
  EXPECT_EQ(m["requests"], 100);
  EXPECT_EQ(m["errors"], 4);
  EXPECT_NEAR(m["p50_ms"].get<double>(), 50.0, 1e-9);
  EXPECT_NEAR(m["p99_ms"].get<double>(), 99.0, 1e-9);
  EXPECT_EQ(m["batch_rows_mean"], 4.0);
  EXPECT_EQ(m["batch_rows_max"], 6);
  EXPECT_EQ(j["serving_window_seconds"], 60);
}

}  // namespace
}  // namespace anvil::server
