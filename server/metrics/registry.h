// A small metrics registry rendering the Prometheus text exposition format (version 0.0.4).
//
// Families of counters, gauges and histograms, each with fixed label names; a child (one
// label-value combination) is created on first use and kept until removed. Updating a child
// is a relaxed atomic add or store: cheap enough for per-request and per-step paths (look the
// child up once and keep the reference where it is hot). Collectors run before each render
// to refresh values that are read rather than counted (process memory, jobs by state).
//
// Thread-safety: everything may be called from any thread. References to children stay
// valid until remove() of that child or the registry's destruction.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace anvil::server::metrics {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  // For counters read from a monotonic source at scrape time (process CPU seconds).
  void set_total(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1.0) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted, without +Inf
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, then +Inf (not cumulative)
  std::atomic<double> sum_{0.0};
};

// Bucket bounds: `count` bounds start, start*factor, ...
std::vector<double> exponential_buckets(double start, double factor, int count);

enum class Kind { kCounter, kGauge, kHistogram };

template <typename M>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}

  // The child for these label values (one per label name, in order); created on first use.
  M& with(const LabelValues& values = {});
  void remove(const LabelValues& values);
  // Removes every child whose value for label `label` is `value`.
  void remove_matching(const std::string& label, const std::string& value);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // (values, child) pairs in label order; children stay alive while the caller holds them.
  std::vector<std::pair<LabelValues, std::shared_ptr<M>>> children() const;

 private:
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<LabelValues, std::shared_ptr<M>> children_;
};

class Registry {
 public:
  // Registering the same name twice returns the first family (the kinds must match).
  Family<Counter>& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                               std::vector<double> bounds);
  void add_collector(std::function<void()> collector);

  // Runs the collectors, then writes every family in registration order.
  std::string render();

 private:
  struct Entry {
    Kind kind;
    std::shared_ptr<void> family;
  };
  template <typename F, typename Make>
  F& FindOrAdd(const std::string& name, Kind kind, const Make& make);
  std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Entry> families_;
  std::vector<std::function<void()>> collectors_;
};

// Exposition helpers (exposed for tests).
std::string escape_label_value(const std::string& v);
std::string format_value(double v);

}  // namespace anvil::server::metrics
