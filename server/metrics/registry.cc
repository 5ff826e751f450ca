#include "server/metrics/registry.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "core/util/error.h"

namespace anvil::server::metrics {

void advance_to(Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

template <typename M>
M& Family<M>::with(const LabelValues& values) {
  ANVIL_CHECK(values.size() == label_names_.size(), "metric ", name_, ": expected ", label_names_.size(),
              " label values, got ", values.size());
  MutexLock lock(&mu_);
  const auto it = series_.find(values);
  if (it != series_.end()) return *it->second;
  prometheus::Labels labels;
  for (size_t i = 0; i < values.size(); ++i) labels[label_names_[i]] = values[i];
  M* series = nullptr;
  if constexpr (std::is_same_v<M, Histogram>) {
    series = &family_.Add(labels, bounds_);
  } else {
    series = &family_.Add(labels);
  }
  series_.emplace(values, series);
  return *series;
}

template <typename M>
void Family<M>::remove(const LabelValues& values) {
  MutexLock lock(&mu_);
  const auto it = series_.find(values);
  if (it == series_.end()) return;
  family_.Remove(it->second);
  series_.erase(it);
}

template <typename M>
void Family<M>::remove_matching(const std::string& label, const std::string& value) {
  const auto pos = std::find(label_names_.begin(), label_names_.end(), label);
  if (pos == label_names_.end()) return;
  const size_t i = static_cast<size_t>(pos - label_names_.begin());
  MutexLock lock(&mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    if (it->first[i] == value) {
      family_.Remove(it->second);
      series_.erase(it++);  // a flat_hash_map's erase leaves the other iterators valid
    } else {
      ++it;
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {

template <typename M>
constexpr const char* kKind = std::is_same_v<M, Counter> ? "counter"
                              : std::is_same_v<M, Gauge> ? "gauge"
                                                         : "histogram";
template <typename M>
constexpr prometheus::MetricType kType = std::is_same_v<M, Counter> ? prometheus::MetricType::Counter
                                         : std::is_same_v<M, Gauge> ? prometheus::MetricType::Gauge
                                                                    : prometheus::MetricType::Histogram;

// prometheus-cpp 1.0 writes HELP as given, where the format wants \ and newlines escaped:
// one-line help without backslashes is what both agree on.
void CheckHelp(const std::string& name, const std::string& help) {
  ANVIL_CHECK(help.find_first_of("\\\n") == std::string::npos, "metric ", name,
              ": help must be one line without backslashes, got '", help, "'");
}

}  // namespace

Registry::Registry() : registry_(std::make_shared<prometheus::Registry>()) {}

template <typename M, typename Make>
Family<M>& Registry::FindOrAdd(const std::string& name, const std::string& help, const Make& make) {
  MutexLock lock(&mu_);
  const auto it = declared_.find(name);
  if (it != declared_.end()) {
    ANVIL_CHECK(it->second.type == kType<M>, "metric ", name, " is registered with another type than ", kKind<M>);
    return *std::static_pointer_cast<Family<M>>(it->second.family);
  }
  std::shared_ptr<Family<M>> family = make();
  declared_[name] = {static_cast<int>(declared_.size()), help, kType<M>, family};
  return *family;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  CheckHelp(name, help);
  return FindOrAdd<Counter>(name, help, [&] {
    auto& f = prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
    return std::make_shared<Family<Counter>>(f, name, std::move(labels));
  });
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  CheckHelp(name, help);
  return FindOrAdd<Gauge>(name, help, [&] {
    auto& f = prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
    return std::make_shared<Family<Gauge>>(f, name, std::move(labels));
  });
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels, std::vector<double> bounds) {
  CheckHelp(name, help);
  ANVIL_CHECK(std::adjacent_find(bounds.begin(), bounds.end(), std::greater_equal<double>()) == bounds.end(), "metric ",
              name, ": bucket bounds must be strictly increasing");
  return FindOrAdd<Histogram>(name, help, [&] {
    auto& f = prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
    return std::make_shared<Family<Histogram>>(f, name, std::move(labels), std::move(bounds));
  });
}

void Registry::add_collector(std::function<void()> collector) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::render() {
  std::vector<std::function<void()>> collectors;
  std::map<std::string, Declared> declared;
  {
    MutexLock lock(&mu_);
    collectors = collectors_;
    declared = declared_;
  }
  for (const auto& c : collectors) c();
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  // The library leaves out a family without series: declare it all the same.
  for (const auto& entry : declared) {  // not a structured binding: clang 14 cannot capture one
    const std::string& name = entry.first;
    const bool collected = std::any_of(families.begin(), families.end(),
                                       [&](const prometheus::MetricFamily& f) { return f.name == name; });
    if (!collected) families.push_back({name, entry.second.help, entry.second.type, {}});
  }
  // The library keeps families by kind and series in a hash map: registration order and
  // sorted label values read the same from scrape to scrape (and diff well).
  const auto rank = [&](const prometheus::MetricFamily& f) {
    const auto it = declared.find(f.name);
    return it == declared.end() ? static_cast<int>(declared.size()) : it->second.order;
  };
  std::stable_sort(families.begin(), families.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  for (prometheus::MetricFamily& f : families) {
    std::sort(f.metric.begin(), f.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                return std::lexicographical_compare(
                    a.label.begin(), a.label.end(), b.label.begin(), b.label.end(),
                    [](const auto& x, const auto& y) { return std::tie(x.name, x.value) < std::tie(y.name, y.value); });
              });
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace anvil::server::metrics
