#include "server/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/util/error.h"

namespace anvil::server::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  ANVIL_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram: bucket bounds must be sorted");
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  // The first bound >= v ("le": less or equal); past the last one, +Inf.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    std::shared_ptr<M> child;
    if constexpr (std::is_same_v<M, Histogram>) {
      child = std::make_shared<Histogram>(bounds_);
    } else {
      child = std::make_shared<M>();
    }
    it = children_.emplace(values, std::move(child)).first;
  }
  return *it->second;
}

template <typename M>
void Family<M>::remove(const LabelValues& values) {
  std::lock_guard<std::mutex> lock(mu_);
  children_.erase(values);
}

template <typename M>
void Family<M>::remove_matching(const std::string& label, const std::string& value) {
  const auto pos = std::find(label_names_.begin(), label_names_.end(), label);
  if (pos == label_names_.end()) return;
  const size_t i = static_cast<size_t>(pos - label_names_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = children_.begin(); it != children_.end();) {
    it = it->first[i] == value ? children_.erase(it) : std::next(it);
  }
}

template <typename M>
std::vector<std::pair<LabelValues, std::shared_ptr<M>>> Family<M>::children() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {children_.begin(), children_.end()};
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename F, typename Make>
F& Registry::FindOrAdd(const std::string& name, Kind kind, const Make& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    ANVIL_CHECK(it->second.kind == kind, "metric ", name, " is registered with another type");
    return *std::static_pointer_cast<F>(it->second.family);
  }
  std::shared_ptr<F> f = make();
  families_[name] = {kind, f};
  order_.push_back(name);
  return *f;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return FindOrAdd<Family<Counter>>(name, Kind::kCounter,
                                    [&] { return std::make_shared<Family<Counter>>(name, help, std::move(labels)); });
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return FindOrAdd<Family<Gauge>>(name, Kind::kGauge,
                                  [&] { return std::make_shared<Family<Gauge>>(name, help, std::move(labels)); });
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels, std::vector<double> bounds) {
  return FindOrAdd<Family<Histogram>>(name, Kind::kHistogram, [&] {
    return std::make_shared<Family<Histogram>>(name, help, std::move(labels), std::move(bounds));
  });
}

void Registry::add_collector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int digits = 15; digits <= 17; ++digits) {  // the shortest text that reads back exactly
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {

std::string EscapeHelp(const std::string& h) {
  std::string out;
  for (char c : h) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string LabelSet(const std::vector<std::string>& names, const LabelValues& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape_label_value(values[i]) + "\"";
  }
  if (!extra_name.empty()) out += (out.empty() ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return out.empty() ? "" : "{" + out + "}";
}

}  // namespace

std::string Registry::render() {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& c : collectors) c();
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Entry& e = families_.at(name);
    auto header = [&](const std::string& help, const char* type) {
      out += "# HELP " + name + " " + EscapeHelp(help) + "\n# TYPE " + name + " " + type + "\n";
    };
    if (e.kind == Kind::kCounter) {
      auto& f = *std::static_pointer_cast<Family<Counter>>(e.family);
      header(f.help(), "counter");
      for (const auto& [values, c] : f.children()) {
        out += name + LabelSet(f.label_names(), values) + " " + format_value(c->value()) + "\n";
      }
    } else if (e.kind == Kind::kGauge) {
      auto& f = *std::static_pointer_cast<Family<Gauge>>(e.family);
      header(f.help(), "gauge");
      for (const auto& [values, g] : f.children()) {
        out += name + LabelSet(f.label_names(), values) + " " + format_value(g->value()) + "\n";
      }
    } else {
      auto& f = *std::static_pointer_cast<Family<Histogram>>(e.family);
      header(f.help(), "histogram");
      for (const auto& [values, h] : f.children()) {
        const Histogram::Snapshot s = h->snapshot();
        for (size_t i = 0; i < s.bounds.size(); ++i) {
          out += name + "_bucket" + LabelSet(f.label_names(), values, "le", format_value(s.bounds[i])) + " " +
                 std::to_string(s.cumulative[i]) + "\n";
        }
        out += name + "_bucket" + LabelSet(f.label_names(), values, "le", "+Inf") + " " +
               std::to_string(s.cumulative.back()) + "\n";
        out += name + "_sum" + LabelSet(f.label_names(), values) + " " + format_value(s.sum) + "\n";
        out += name + "_count" + LabelSet(f.label_names(), values) + " " + std::to_string(s.count) + "\n";
      }
    }
  }
  return out;
}

}  // namespace anvil::server::metrics
