// The service's metrics on prometheus-cpp (Debian's prometheus-cpp-dev): counters, gauges and
// histograms are prometheus::Counter, Gauge and Histogram, each family a prometheus::Family in
// one prometheus::Registry, and /metrics is that registry through prometheus::TextSerializer.
//
// What this adds to the library: a family's label names are fixed when it is registered, so
// a series is addressed by its label values in order (`family.with({job, name})`, checked
// against the names), and series can be removed by one label's value (a deleted job's);
// collectors run before each render to refresh values that are read rather than counted
// (process memory, jobs by state); the rendered families keep their registration order and
// each family's series are sorted by label values, so the exposition reads the same scrape to
// scrape.
//
// Thread-safety: everything may be called from any thread. Updating a series is the
// library's relaxed atomic add or store; look a series up once where it is hot. References to
// series stay valid until remove() of that series or the registry's destruction.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_type.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::server::metrics {

using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;
using LabelValues = std::vector<std::string>;

// For a counter read from a monotonic source at scrape time (process CPU seconds, a device
// allocator's call count): raises it to `total` (a counter never goes down).
void advance_to(Counter& counter, double total);

// Bucket bounds: `count` bounds start, start*factor, ...
std::vector<double> exponential_buckets(double start, double factor, int count);

template <typename M>
class Family {
 public:
  Family(prometheus::Family<M>& family, std::string name, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : family_(family), name_(std::move(name)), label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}

  // The series for these label values (one per label name, in order); created on first use.
  M& with(const LabelValues& values = {});
  void remove(const LabelValues& values);
  // Removes every series whose value for label `label` is `value`.
  void remove_matching(const std::string& label, const std::string& value);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  prometheus::Family<M>& family_;
  const std::string name_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  Mutex mu_;
  // Looked up on every update through with() (each Predict, each training step): hashed, not
  // ordered (render() sorts what it writes).
  absl::flat_hash_map<LabelValues, M*> series_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry();
  // Registering the same name twice returns the first family (the kinds and labels must match).
  Family<Counter>& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                               std::vector<double> bounds);
  void add_collector(std::function<void()> collector);

  // Runs the collectors, then writes every family (text exposition format 0.0.4).
  std::string render();

  // The library's registry, for anything that takes a prometheus::Collectable.
  std::shared_ptr<prometheus::Registry> prometheus_registry() const { return registry_; }

 private:
  template <typename M, typename Make>
  Family<M>& FindOrAdd(const std::string& name, const std::string& help, const Make& make);
  const std::shared_ptr<prometheus::Registry> registry_;
  Mutex mu_;
  struct Declared {
    int order;  // registration order
    std::string help;
    prometheus::MetricType type;
    std::shared_ptr<void> family;  // the Family<M> of `type`
  };
  std::map<std::string, Declared> declared_ ABSL_GUARDED_BY(mu_);  // by name
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace anvil::server::metrics
