// The live status page on the metrics address: `/` is a self-contained HTML page (no external
// scripts or styles) that polls `/status.json` and draws the jobs table, each job's charts on
// one step axis with its findings beside them, and the served models' table in the browser,
// so a single-machine user sees training and serving without Grafana.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/util/mutex.h"
#include "server/finding_set.h"
#include "server/metrics/serving_stats.h"
#include "server/store.h"

namespace anvil::server {

// A series kept downsampled as its points arrive: every stride-th point (the stride doubles
// whenever max_points would be passed, dropping every other point kept) plus the newest, so it
// holds at most max_points, evenly spaced, whatever the series' length.
// Not thread-safe: StatusPage keeps its series under its own lock.
class DownsampledSeries {
 public:
  explicit DownsampledSeries(size_t max_points) : max_points_(max_points < 2 ? 2 : max_points) {}
  void add(int64_t step, double value);
  std::vector<std::pair<int64_t, double>> points() const;
  int64_t last_step() const { return count_ == 0 ? -1 : last_.first; }

 private:
  size_t max_points_;
  int64_t stride_ = 1, count_ = 0;
  std::vector<std::pair<int64_t, double>> kept_;
  std::pair<int64_t, double> last_{0, 0};
};

// /status.json: the newest `max_jobs` jobs with their state, progress, failure reason, spec,
// findings (each code once at its highest severity, as GetFindings) and time series on the
// step axis (train loss, grad norm, learning rate, samples/s, data-wait share and, with loss
// scaling, the loss scale per metric interval; validation loss and accuracy per epoch), each
// series at most `max_points` (StreamMetrics has the full resolution); and, when `serving` is
// given, the newest `max_models` served models with their versions, each loaded version's
// precision, and the last minute's request rate, p50/p99 latency, batch sizes and errors.
// The endpoint has no authentication, so its cost must not grow with history: at most 20 jobs
// x 8 series x 250 points (a chart a few hundred pixels wide shows no more); each job's series
// are kept downsampled here and read from the store incrementally (only the events after the
// last one read), and their JSON text is kept until a new event arrives, so a request costs
// the events since the last one, not the job's whole history.
// Thread-safe: one request at a time builds the page.
class StatusPage {
 public:
  // The step-axis series, in the order the page draws them.
  static const std::vector<std::string>& series_names();

  StatusPage(const Store& store, int64_t max_jobs = 20, size_t max_points = 250,
             const metrics::ServingStats* serving = nullptr, int64_t max_models = 20)
      : store_(store), max_jobs_(max_jobs), max_points_(max_points), serving_(serving), max_models_(max_models) {}
  std::string json();

 private:
  struct Series {
    int64_t after_seq = 0;                  // the last metric event read
    std::vector<DownsampledSeries> series;  // series_names() order
    FindingSet findings;
    std::string text;  // the series and findings as JSON members ("\"train_loss\":[...],..."); "" once stale
    explicit Series(size_t max_points) : series(series_names().size(), DownsampledSeries(max_points)) {}
  };
  void Update(const std::string& job_id, Series& s);
  nlohmann::json Models() const;

  const Store& store_;
  const int64_t max_jobs_;
  const size_t max_points_;
  const metrics::ServingStats* serving_;
  const int64_t max_models_;
  // Held while a page is built.
  Mutex mu_;
  std::map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);  // the jobs on the page last time
};

// One page built from scratch (no cache): for tests and one-off callers.
std::string status_json(const Store& store, int64_t max_jobs = 20, size_t max_points = 250);
const std::string& status_html();

}  // namespace anvil::server
