// The metrics registry (prometheus-cpp underneath) and its Prometheus text exposition (format
// 0.0.4), checked against text written out by hand from the format's rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "core/util/error.h"
#include "server/metrics/registry.h"

namespace anvil::server::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsRegistry, RendersCountersGaugesAndHistogramsExactly) {
  Registry r;
  auto& requests = r.counter("app_requests_total", "Requests served.", {"model", "code"});
  requests.with({"digits", "OK"}).Increment();
  requests.with({"digits", "OK"}).Increment(2);
  requests.with({"a\"b\\c\nd", "NOT_FOUND"}).Increment();
  r.gauge("app_temperature_celsius", "Temperature.").with().Set(-1.5);
  auto& latency = r.histogram("app_latency_seconds", "Latency.", {"model"}, {0.1, 0.5, 1});
  Histogram& h = latency.with({"digits"});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0}) h.Observe(v);
  // Families in registration order; a series' labels by name, the series by label values.
  const std::string expected =
      "# HELP app_requests_total Requests served.\n"
      "# TYPE app_requests_total counter\n"
      "app_requests_total{code=\"NOT_FOUND\",model=\"a\\\"b\\\\c\\nd\"} 1\n"
      "app_requests_total{code=\"OK\",model=\"digits\"} 3\n"
      "# HELP app_temperature_celsius Temperature.\n"
      "# TYPE app_temperature_celsius gauge\n"
      "app_temperature_celsius -1.5\n"
      "# HELP app_latency_seconds Latency.\n"
      "# TYPE app_latency_seconds histogram\n"
      "app_latency_seconds_count{model=\"digits\"} 5\n"
      "app_latency_seconds_sum{model=\"digits\"} 3.15\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"0.1\"} 2\n"  // 0.1 itself is "le 0.1"
      "app_latency_seconds_bucket{model=\"digits\",le=\"0.5\"} 3\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"1\"} 4\n"
      "app_latency_seconds_bucket{model=\"digits\",le=\"+Inf\"} 5\n";
  EXPECT_EQ(r.render(), expected);
  EXPECT_EQ(r.render(), expected);  // and the same again: the order does not depend on hashing
}

TEST(MetricsRegistry, ValuesReadBackAsPrometheusParsesThem) {
  // Prometheus reads a sample with Go's ParseFloat: decimal or exponent text, "+Inf"/"-Inf",
  // and NaN in any case. The library writes 16 significant digits.
  const double values[] = {3, 0.1, 1e-7, 1.0 / 3.0, 123456789012.0, -INFINITY, std::nan("")};
  for (double v : values) {
    Registry r;
    r.gauge("app_value", "A value.").with().Set(v);
    const std::string text = r.render();
    const std::string key = "\napp_value ";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    const std::string sample = text.substr(at + key.size(), text.find('\n', at + 1) - at - key.size());
    const double back = std::strtod(sample.c_str(), nullptr);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(back)) << sample;
    } else if (std::isinf(v)) {
      EXPECT_EQ(sample, "-Inf");
    } else {
      EXPECT_NEAR(back, v, std::fabs(v) * 1e-15) << sample;
    }
  }
}

TEST(MetricsRegistry, CollectorsRunBeforeRenderAndSeriesCanBeRemoved) {
  Registry r;
  auto& g = r.gauge("app_jobs", "Jobs.", {"job", "state"});
  int calls = 0;
  r.add_collector([&] {
    ++calls;
    g.with({"j1", "RUNNING"}).Set(1);
  });
  g.with({"j2", "QUEUED"}).Set(1);
  EXPECT_THAT(r.render(), HasSubstr("app_jobs{job=\"j1\",state=\"RUNNING\"} 1"));
  EXPECT_EQ(calls, 1);
  g.remove_matching("job", "j2");
  EXPECT_THAT(r.render(), ::testing::Not(HasSubstr("j2")));
  g.with({"j3", "QUEUED"}).Set(5);
  g.remove({"j3", "QUEUED"});
  EXPECT_THAT(r.render(), ::testing::Not(HasSubstr("j3")));
  g.with({"j3", "QUEUED"}).Increment();  // a removed series comes back fresh
  EXPECT_THAT(r.render(), HasSubstr("app_jobs{job=\"j3\",state=\"QUEUED\"} 1\n"));
  EXPECT_EQ(&r.gauge("app_jobs", "Jobs.", {"job", "state"}), &g);  // registering again returns the family
  EXPECT_THROW(r.counter("app_jobs", "x"), anvil::Error);          // ... of the same type only
  EXPECT_THROW(g.with({"only one"}), anvil::Error);                // label count checked
  // The library writes help text as given: only a line that needs no escaping is accepted.
  EXPECT_THROW(r.gauge("app_bad_help", "Line one\nline two"), anvil::Error);
  EXPECT_THROW(r.histogram("app_bad_bounds", "Bounds.", {}, {1, 1, 2}), anvil::Error);
}

TEST(MetricsRegistry, AFamilyWithoutSeriesStillDeclaresItself) {
  // The library leaves such a family out; its HELP and TYPE say it exists (a dashboard's
  // query for it is then known to be empty, not misspelt).
  Registry r;
  r.gauge("app_busy_ratio", "Busy share.", {"device"});
  EXPECT_EQ(r.render(), "# HELP app_busy_ratio Busy share.\n# TYPE app_busy_ratio gauge\n");
}

TEST(MetricsRegistry, CountersReadFromAMonotonicSourceOnlyRise) {
  Registry r;
  Counter& c = r.counter("app_cpu_seconds_total", "CPU.").with();
  advance_to(c, 2.5);
  advance_to(c, 1.0);  // a source read out of order never lowers a counter
  EXPECT_EQ(c.Value(), 2.5);
  advance_to(c, 4.0);
  EXPECT_THAT(r.render(), HasSubstr("app_cpu_seconds_total 4\n"));
}

TEST(MetricsRegistry, ConcurrentUpdatesAreExact) {
  Registry r;
  Counter& c = r.counter("app_events_total", "Events.").with();
  Histogram& h = r.histogram("app_sizes", "Sizes.", {}, exponential_buckets(1, 2, 4)).with();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 40000);
  const prometheus::ClientMetric::Histogram s = h.Collect().histogram;
  EXPECT_EQ(s.sample_count, 40000u);
  ASSERT_EQ(s.bucket.size(), 5u);                   // 1, 2, 4, 8, +Inf
  EXPECT_EQ(s.bucket[1].cumulative_count, 0u);      // le 2
  EXPECT_EQ(s.bucket[2].cumulative_count, 40000u);  // le 4
  EXPECT_EQ(s.sample_sum, 120000);
}

}  // namespace
}  // namespace anvil::server::metrics
