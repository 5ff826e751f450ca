// The metrics registry and its Prometheus text exposition (format 0.0.4), checked against
// text written out by hand from the format's rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "core/util/error.h"
#include "server/metrics/registry.h"

namespace anvil::server::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsRegistry, RendersCountersGaugesAndHistogramsExactly) {
  Registry r;
  auto& requests = r.counter("app_requests_total", "Requests served.", {"model", "code"});
  requests.with({"digits", "OK"}).inc();
  requests.with({"digits", "OK"}).inc(2);
  requests.with({"a\"b\\c\nd", "NOT_FOUND"}).inc();
  r.gauge("app_temperature_celsius", "Line one\nline \\two").with().set(-1.5);
  auto& latency = r.histogram("app_latency_seconds", "Latency.", {"model"}, {0.1, 0.5, 1});
  Histogram& h = latency.with({"digits"});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0}) h.observe(v);
  const std::string expected =
      "# HELP app_requests_total Requests served.\n"
      "# TYPE app_requests_total counter\n"
      "app_requests_total{model=\"a\\\"b\\\\c\\nd\",code=\"NOT_FOUND\"} 1\n"
      "app_requests_total{model=\"digits\",code=\"OK\"} 3\n"
      "# HELP app_temperature_celsius Line one\\nline \\\\two\n"
      "# TYPE app_temperature_celsius gauge\n"
      "app_temperature_celsius -1.5\n"
      "# HELP app_latency_seconds Latency.\n"
      "# TYPE app_latency_seconds histogram\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"0.1\"} 2\n"  // 0.1 itself is "le 0.1"
      "app_latency_seconds_bucket{model=\"digits\",le=\"0.5\"} 3\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"1\"} 4\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"+Inf\"} 5\n"
      "app_latency_seconds_sum{model=\"digits\"} 3.15\n"
      "app_latency_seconds_count{model=\"digits\"} 5\n";
  EXPECT_EQ(r.render(), expected);
}

TEST(MetricsRegistry, FormatsValuesExactly) {
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e-7), "1e-07");                    // the shortest text that reads back exactly
  EXPECT_EQ(std::stod(format_value(1.0 / 3.0)), 1.0 / 3.0);  // reads back exactly
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
}

TEST(MetricsRegistry, CollectorsRunBeforeRenderAndChildrenCanBeRemoved) {
  Registry r;
  auto& g = r.gauge("app_jobs", "Jobs.", {"job", "state"});
  int calls = 0;
  r.add_collector([&] {
    ++calls;
    g.with({"j1", "RUNNING"}).set(1);
  });
  g.with({"j2", "QUEUED"}).set(1);
  EXPECT_THAT(r.render(), HasSubstr("app_jobs{job=\"j1\",state=\"RUNNING\"} 1"));
  EXPECT_EQ(calls, 1);
  g.remove_matching("job", "j2");
  EXPECT_THAT(r.render(), ::testing::Not(HasSubstr("j2")));
  EXPECT_EQ(&r.gauge("app_jobs", "Jobs.", {"job", "state"}), &g);  // registering again returns the family
  EXPECT_THROW(r.counter("app_jobs", "x"), anvil::Error);          // ... of the same type only
  EXPECT_THROW(g.with({"only one"}), anvil::Error);                // label count checked
}

TEST(MetricsRegistry, ConcurrentUpdatesAreExact) {
  Registry r;
  Counter& c = r.counter("app_events_total", "Events.").with();
  Histogram& h = r.histogram("app_sizes", "Sizes.", {}, exponential_buckets(1, 2, 4)).with();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[1], 0u);      // le 2
  EXPECT_EQ(s.cumulative[2], 40000u);  // le 4
  EXPECT_EQ(s.sum, 120000);
}

}  // namespace
}  // namespace anvil::server::metrics
