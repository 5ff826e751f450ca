#include "server/metrics/serving_stats.h"

#include <algorithm>
#include <cmath>

namespace anvil::server::metrics {
namespace {

int64_t WholeSeconds(ServingStats::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// The nearest-rank percentile: the ceil(p * n)-th smallest (p in (0, 1]).
double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  const size_t k = std::clamp<size_t>(rank, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

ServingStats::ServingStats(std::chrono::seconds window, size_t max_models, size_t max_samples)
    : window_(std::max(window, std::chrono::seconds(1))),
      max_models_(std::max<size_t>(max_models, 1)),
      max_samples_(std::max<size_t>(max_samples, 1)) {}

ServingStats::Model& ServingStats::Find(const std::string& model, Clock::time_point now) {
  auto it = models_.find(model);
  if (it == models_.end()) {
    if (models_.size() >= max_models_) {
      auto idle = std::min_element(models_.begin(), models_.end(), [](const auto& a, const auto& b) {
        return a.second.last_active < b.second.last_active;
      });
      models_.erase(idle);
    }
    it = models_.emplace(model, Model{}).first;
    it->second.seconds.resize(static_cast<size_t>(window_.count()));
  }
  it->second.last_active = now;
  return it->second;
}

ServingStats::Second& ServingStats::SlotAt(Model& m, Clock::time_point now) const {
  const int64_t s = WholeSeconds(now);
  Second& slot = m.seconds[static_cast<size_t>(s % window_.count())];
  if (slot.second != s) slot = Second{s};
  return slot;
}

void ServingStats::on_request(const std::string& model, double seconds, bool ok, Clock::time_point now) {
  MutexLock lock(&mu_);
  Model& m = Find(model, now);
  if (m.requests_total == 0) m.first_request = now;
  ++m.requests_total;
  Second& slot = SlotAt(m, now);
  ++slot.requests;
  if (!ok) {
    ++m.errors_total;
    ++slot.errors;
  }
  m.latencies.push_back({now, seconds});
  while (!m.latencies.empty() && (m.latencies.front().at < now - window_ || m.latencies.size() > max_samples_))
    m.latencies.pop_front();
}

void ServingStats::on_batch(const std::string& model, int64_t rows, Clock::time_point now) {
  MutexLock lock(&mu_);
  Second& slot = SlotAt(Find(model, now), now);
  ++slot.batches;
  slot.rows += rows;
  slot.max_rows = std::max(slot.max_rows, rows);
}

void ServingStats::on_loaded(const std::string& model, int64_t version, const std::string& precision,
                             Clock::time_point now) {
  MutexLock lock(&mu_);
  Model& m = Find(model, now);
  m.precision[version] = precision;
  // Bounded like the samples: the newest versions stay.
  while (m.precision.size() > max_samples_) m.precision.erase(m.precision.begin());
}

void ServingStats::on_unloaded(const std::string& model, int64_t version) {
  MutexLock lock(&mu_);
  if (auto it = models_.find(model); it != models_.end()) it->second.precision.erase(version);
}

ServingStats::Summary ServingStats::summary(const std::string& model, Clock::time_point now) const {
  MutexLock lock(&mu_);
  Summary out;
  auto it = models_.find(model);
  if (it == models_.end()) return out;
  const Model& m = it->second;
  out.requests_total = m.requests_total;
  out.errors_total = m.errors_total;
  out.precision = m.precision;
  // The window: the last window_ whole seconds, this one included.
  const int64_t newest = WholeSeconds(now), oldest = newest - window_.count() + 1;
  int64_t rows = 0;
  for (const Second& s : m.seconds) {
    if (s.second < oldest || s.second > newest) continue;
    out.requests += s.requests;
    out.errors += s.errors;
    out.batches += s.batches;
    rows += s.rows;
    out.batch_rows_max = std::max(out.batch_rows_max, s.max_rows);
  }
  if (out.batches > 0) out.batch_rows_mean = static_cast<double>(rows) / static_cast<double>(out.batches);
  // A server up for 5 s that served 50 requests serves 10 per second, not 50/60.
  const Clock::time_point since = std::max(now - window_, m.first_request);
  const double span = std::chrono::duration<double>(now - since).count();
  if (out.requests > 0) out.requests_per_second = static_cast<double>(out.requests) / std::max(span, 1.0);
  std::vector<double> latencies;
  latencies.reserve(m.latencies.size());
  for (const Latency& l : m.latencies)
    if (l.at >= now - window_) latencies.push_back(l.seconds);
  out.p50_seconds = Percentile(latencies, 0.50);
  out.p99_seconds = Percentile(latencies, 0.99);
  return out;
}

}  // namespace anvil::server::metrics
