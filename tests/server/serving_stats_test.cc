// The status page's serving numbers: the window's request rate, nearest-rank latency
// percentiles checked against a sorted copy, batch sizes, errors, and the bounds on memory.
#include "server/metrics/serving_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace anvil::server::metrics {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The p-th percentile by its definition: the smallest value with at least p of the values at
// or below it.
double SmallestCovering(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  for (double x : v) {
    const auto at_or_below = std::count_if(v.begin(), v.end(), [&](double y) { return y <= x; });
    if (static_cast<double>(at_or_below) >= p * static_cast<double>(v.size())) return x;
  }
  return v.back();
}

TEST(ServingStats, PercentilesRateAndErrorsOverTheWindow) {
  ServingStats stats(seconds(60));
  const auto t0 = ServingStats::Clock::time_point{} + seconds(1000);
  std::mt19937 rng(7);
  std::lognormal_distribution<double> latency(-5, 1);
  std::vector<double> in_window;
  // 200 requests long ago (outside the window), then 301 over the last 30 s, one in ten failing.
  for (int i = 0; i < 200; ++i) stats.on_request("m", 10.0, true, t0 + milliseconds(i));
  const auto start = t0 + seconds(100);
  for (int i = 0; i < 301; ++i) {
    const double s = latency(rng);
    in_window.push_back(s);
    stats.on_request("m", s, i % 10 != 0, start + milliseconds(100 * i));
  }
  const auto now = start + seconds(30);
  const ServingStats::Summary sum = stats.summary("m", now);
  EXPECT_EQ(sum.requests_total, 501);
  EXPECT_EQ(sum.requests, 301);
  EXPECT_EQ(sum.errors, 31);
  EXPECT_EQ(sum.errors_total, 31);
  EXPECT_DOUBLE_EQ(sum.p50_seconds, SmallestCovering(in_window, 0.50));
  EXPECT_DOUBLE_EQ(sum.p99_seconds, SmallestCovering(in_window, 0.99));
  EXPECT_NEAR(sum.requests_per_second, 301.0 / 60.0, 1e-9);  // the server is older than the window
  // 61 s later nothing is left in the window; the totals stay.
  const ServingStats::Summary later = stats.summary("m", now + seconds(61));
  EXPECT_EQ(later.requests, 0);
  EXPECT_EQ(later.p99_seconds, 0);
  EXPECT_EQ(later.requests_per_second, 0);
  EXPECT_EQ(later.requests_total, 501);
}

TEST(ServingStats, AYoungModelsRateIsOverItsOwnAge) {
  ServingStats stats(seconds(60));
  const auto t0 = ServingStats::Clock::time_point{} + seconds(1000);
  for (int i = 0; i < 50; ++i) stats.on_request("m", 0.001, true, t0 + milliseconds(100 * i));
  EXPECT_NEAR(stats.summary("m", t0 + seconds(5)).requests_per_second, 10.0, 1e-9);
}

// Counts are exact at any rate (a counter per second); the percentiles come from the newest
// max_samples latencies; batches, precision per loaded version, and a bounded set of names.
TEST(ServingStats, CountsAtAnyRateBatchesPrecisionAndBoundedNames) {
  ServingStats stats(seconds(60), /*max_models=*/2, /*max_samples=*/4);
  const auto t0 = ServingStats::Clock::time_point{} + seconds(1000);
  for (int i = 0; i < 10000; ++i)
    stats.on_request("a", i < 9996 ? 1.0 : 0.001 * (i - 9995), i % 100 != 0,
                     t0 + milliseconds(i));  // 1,000 a second
  for (int64_t rows : {1, 8, 3, 16, 4, 2}) stats.on_batch("a", rows, t0 + seconds(5));
  stats.on_loaded("a", 1, "fp32", t0 + seconds(5));
  stats.on_loaded("a", 2, "int8", t0 + seconds(5));
  const ServingStats::Summary a = stats.summary("a", t0 + seconds(10));
  EXPECT_EQ(a.requests, 10000);
  EXPECT_EQ(a.errors, 100);
  EXPECT_NEAR(a.requests_per_second, 1000.0, 1e-9);  // 10,000 over the 10 s since the first
  // The newest four latencies: 1, 2, 3, 4 ms.
  EXPECT_DOUBLE_EQ(a.p50_seconds, 0.002);
  EXPECT_DOUBLE_EQ(a.p99_seconds, 0.004);
  EXPECT_EQ(a.batches, 6);
  EXPECT_DOUBLE_EQ(a.batch_rows_mean, 34.0 / 6);
  EXPECT_EQ(a.batch_rows_max, 16);
  EXPECT_EQ(a.precision.at(1), "fp32");
  EXPECT_EQ(a.precision.at(2), "int8");
  stats.on_unloaded("a", 1);  // evicted from memory: no longer loaded here
  EXPECT_EQ(stats.summary("a", t0 + seconds(10)).precision.count(1), 0u);
  // A third name past max_models replaces the one idle longest ("b"), not the busy one.
  stats.on_request("b", 0.5, true, t0 + seconds(6));
  stats.on_request("a", 0.5, true, t0 + seconds(7));
  stats.on_request("c", 0.5, true, t0 + seconds(8));
  EXPECT_EQ(stats.summary("b", t0 + seconds(9)).requests_total, 0);
  EXPECT_EQ(stats.summary("c", t0 + seconds(9)).requests_total, 1);
  EXPECT_EQ(stats.summary("a", t0 + seconds(9)).requests_total, 10001);
}

}  // namespace
}  // namespace anvil::server::metrics
